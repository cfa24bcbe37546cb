"""Tracking plane: the MLflow server jobs log to, the user's (its credentials in a Secret) or one
the stack runs (its image built by the stack; each job its own user, the admin's credentials kept in
the `mlflow` namespace), and the outputs `trainstack` reads to find it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pulumi

from components.image import ImageBuild, ImageBuildArgs
from components.jobs.pods import JobTracking
from components.registry import ImageRegistry
from components.tracking import (
    ADMIN_USER,
    MLFLOW_IMAGE,
    PORT_FORWARD,
    TRACKING_URI,
    TrackingServer,
    TrackingServerArgs,
)
from components.tracking_users import TrackingUsers, TrackingUsersArgs, job_experiment
from config import PROJECT_ROOT, StackConfig
from conventions import SYSTEM_GROUP
from planes.account import Account
from planes.build import ARCHIVE_DIR, BuildPlane, registry_args
from planes.compute import ComputePlane
from stack_outputs import StackOutputs

SERVER_CONTEXT = PROJECT_ROOT / "images" / "mlflow"
SERVER_IMAGE = "mlflow-image"
# The jobs' Secret with the server's credentials (a server the user runs), or with a job's own user's
# (the stack's server: `mlflow-credentials-<job>`).
CREDENTIALS_SECRET = "mlflow-credentials"


@dataclass(frozen=True)
class Tracking:
    """What jobs log to, and the server when the stack runs one."""

    job: JobTracking
    server: TrackingServer | None = None
    server_image: ImageBuild | None = None
    users: TrackingUsers | None = None  # with the stack's server: one user per job

    def for_job(
        self, job: str, secret: Callable[[str, dict], Any], waits_for: list[pulumi.Resource]
    ) -> JobTracking:
        """What one job logs to and as: on the stack's server, its own user and experiment (`secret`
        makes the Secret of its credentials in the job's namespace). The job does not wait for its
        user, nor for the server and its database (off the path to training): the trainer opens its
        run once the server lets it in (workload/trainer/mlflow_run.py retries)."""
        if self.users is None or self.server is None:
            return self.job
        experiment = job_experiment(self.job.experiment, job)
        credentials, _ = self.users.job_user(job, experiment, [self.server.deployment, *waits_for])
        created = secret(f"{CREDENTIALS_SECRET}-{job}", credentials)
        return replace(
            self.job,
            experiment=experiment,
            credentials_secret=created.metadata.name,
            credential_keys=tuple(credentials),
        )


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
        secret = compute.pod_identity.secret(CREDENTIALS_SECRET, credentials) if credentials else None
        return Tracking(
            JobTracking(
                t.uri, experiment, cfg.stack, secret.metadata.name if secret else None, tuple(credentials)
            )
        )
    image = server_image(cfg, account, build)
    server = TrackingServer(
        "tracking",
        TrackingServerArgs(
            provider=compute.provider,
            image=image.image_uri,
            eks=compute.own.eks if compute.own else None,
            system_selector=dict(compute.placements[SYSTEM_GROUP].node_selector),
            system_nodes=compute.system_nodes,
            bucket=build.bucket,
            database=t.server,
            network=compute.own.private_network if compute.own else None,
            protect=cfg.storage.protect,
        ),
        account.opts,
    )
    users = TrackingUsers(
        "tracking-users",
        TrackingUsersArgs(
            provider=compute.provider,
            uri=TRACKING_URI,
            image=image.image_uri,
            admin_secret=server.auth_secret.metadata.name,
            admin_username=ADMIN_USER,
            system_selector=dict(compute.placements[SYSTEM_GROUP].node_selector),
        ),
        pulumi.ResourceOptions(depends_on=[server.namespace]),
    )
    return Tracking(JobTracking(server.uri, experiment, cfg.stack), server, image, users)


def server_image(cfg: StackConfig, account: Account, build: BuildPlane) -> ImageBuild:
    """images/mlflow, built as the training image is (pulumi-docker with `image.builder: docker`,
    else CodeBuild, `none` included: the stack runs this server, so it builds its image), into a
    repository of its own: the registry's lifecycle counts one repository's builds, and the
    training image's would otherwise push the running server's image out. Built from the uploaded
    context only: no webhook, no nightly rebuild, and the base is not a Docker Hub image (no
    pull-through cache)."""
    registry = ImageRegistry("mlflow", registry_args(cfg), account.opts)
    return ImageBuild(
        SERVER_IMAGE,
        ImageBuildArgs(
            context_dir=SERVER_CONTEXT,
            base_image=MLFLOW_IMAGE,
            builder="docker" if cfg.image.builder == "docker" else "codebuild",
            compute_type=cfg.image.compute_type,
            build_timeout_minutes=cfg.image.build_timeout_minutes,
            nightly_rebuild=False,
            source_repository=None,
            docker_hub_username=None,
            docker_hub_access_token=None,
            bucket=build.bucket,
            registry=registry,
            region=cfg.region,
            account_id=account.account_id,
            aws_profile=cfg.aws_profile,
            # Its own directory: an image build removes the other archives in its directory.
            archive_dir=ARCHIVE_DIR / cfg.stack / SERVER_IMAGE,
        ),
        account.opts,
    )


def tracking_outputs(tracking: Tracking | None) -> StackOutputs:
    if tracking is None:
        return {}
    found: StackOutputs = {"trackingUri": tracking.job.uri, "trackingExperiment": tracking.job.experiment}
    if tracking.server is not None:  # no public endpoint: `trainstack` and people port-forward
        found["trackingPortForward"] = PORT_FORWARD
    return found
