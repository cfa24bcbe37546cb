"""Tracking plane: the MLflow server jobs log to, the user's (its credentials in a Secret) or one
the stack runs, and the outputs `trainstack` reads to find it."""

from __future__ import annotations

from dataclasses import dataclass

from components.job_pods import JobTracking
from components.tracking import PORT_FORWARD, TrackingServer, TrackingServerArgs
from config import StackConfig
from conventions import SYSTEM_GROUP
from planes.account import Account
from planes.build import BuildPlane
from planes.compute import ComputePlane
from stack_outputs import StackOutputs


@dataclass(frozen=True)
class Tracking:
    """What jobs log to, and the server when the stack runs one."""

    job: JobTracking
    server: TrackingServer | None = None


def tracking_plane(
    cfg: StackConfig, account: Account | None, build: BuildPlane, compute: ComputePlane
) -> Tracking | None:
    """The MLflow server jobs log to: the user's (its credentials in a Secret), or one the stack
    runs on the system nodes (only on its own cluster: the config refuses it elsewhere)."""
    t = cfg.tracking
    if not t.enabled:
        return None
    experiment = t.experiment_name(cfg.stack)
    if t.mode == "external":
        credentials = {"MLFLOW_TRACKING_TOKEN": cfg.tracking_token} if cfg.tracking_token else {}
        if cfg.tracking_password:
            credentials = {
                "MLFLOW_TRACKING_USERNAME": t.username,
                "MLFLOW_TRACKING_PASSWORD": cfg.tracking_password,
            }
        secret = compute.pod_identity.secret("mlflow-credentials", credentials) if credentials else None
        return Tracking(
            JobTracking(
                t.uri, experiment, cfg.stack, secret.metadata.name if secret else None, tuple(credentials)
            )
        )
    server = TrackingServer(
        "tracking",
        TrackingServerArgs(
            provider=compute.provider,
            eks=compute.eks,
            system_selector=dict(compute.placements[SYSTEM_GROUP].node_selector),
            system_nodes=compute.system_nodes,
            bucket=build.bucket,
            database=t.server,
            network=compute.network,
            protect=cfg.storage.protect,
        ),
        account.opts,
    )
    return Tracking(JobTracking(server.uri, experiment, cfg.stack), server)


def tracking_outputs(tracking: Tracking | None) -> StackOutputs:
    if tracking is None:
        return {}
    found: StackOutputs = {"trackingUri": tracking.job.uri, "trackingExperiment": tracking.job.experiment}
    if tracking.server is not None:  # no public endpoint: `trainstack` and people port-forward
        found["trackingPortForward"] = PORT_FORWARD
    return found
