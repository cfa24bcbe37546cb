"""Jobs plane: each configured PyTorchJob, RayJob or RayCluster, through its group's queue, as its
own service account, with its Secrets, checkpoints, datasets and tracking."""

from __future__ import annotations

from components.job_pods import JobSpec, NodeCheck, TrainingJobArgs
from components.jobs import TrainingJob
from components.operators import ClusterOperators
from components.queueing import Queueing
from components.verl import VERL_IMAGE
from config import StackConfig
from conventions import SYSTEM_GROUP
from domain.names import IAM_ROLE_NAME_MAX, PROJECT, fit
from planes.build import BuildPlane
from planes.compute import ComputePlane
from planes.storage import checkpoints, storage_claims
from planes.tracking import Tracking


def jobs_plane(
    cfg: StackConfig,
    build: BuildPlane,
    compute: ComputePlane,
    operators: ClusterOperators,
    queues: Queueing,
    tracking: Tracking | None,
) -> list[TrainingJob]:
    pods, provider = compute.pod_identity, compute.provider
    hf_secret = None
    if cfg.hf_token is not None:
        hf_secret = pods.secret("hf-token", {"HF_TOKEN": cfg.hf_token})
    by_group = compute.placements
    groups = {g.name: g for g in cfg.gpu_node_groups}
    jobs = []
    for j in cfg.jobs:
        env_secret = None
        if j.env and cfg.secret_job_env:
            env_secret = pods.secret(f"{j.name}-env", j.env)
        placement = by_group[j.node_group]
        group = groups.get(j.node_group)
        node_check = None
        if group is not None and group.checks_efa:
            node_check = NodeCheck(placement.gpus, placement.efa, group.min_bus_bandwidth_gbps)
        provisioned = group is not None and cfg.autoscaled(group)
        identity = pods.job_identity(j.name, fit(f"{PROJECT}-{cfg.stack}-job-{j.name}", IAM_ROLE_NAME_MAX))
        # Device plugins: a job's pods need the GPUs and EFA interfaces advertised.
        extra = [r for r in (hf_secret, env_secret, identity.ready, *operators.device_plugins) if r]
        extra += storage_claims(compute.storage)
        jobs.append(
            TrainingJob(
                f"job-{j.name}",
                TrainingJobArgs(
                    spec=JobSpec(
                        j.name,
                        j.kind,
                        j.nodes,
                        j.model,
                        j.steps,
                        j.command,
                        j.args,
                        j.env,
                        j.wait,
                        j.timeout_minutes,
                        j.verl,
                    ),
                    placement=placement,
                    nodes=compute.group_nodes.get(j.node_group),
                    image=j.image or (VERL_IMAGE if j.verl else build.image_uri),
                    prep_image=build.image_uri,
                    checkpoints=checkpoints(cfg, build, compute.storage, j.node_group, j.name),
                    datasets_claim=compute.storage.datasets.claim_name
                    if compute.storage and compute.storage.datasets
                    else None,
                    namespace=pods.namespace_name,
                    service_account=identity.service_account_name,
                    provider=provider,
                    operator=operators.training_operator if j.kind == "PyTorchJob" else operators.kuberay,
                    queue=j.node_group,
                    provision_minutes=cfg.queueing.max_node_provision_minutes if provisioned else 0,
                    waits_for=[queues.local_queues[j.node_group], *extra],
                    env_secret=env_secret.metadata.name if env_secret else None,
                    hf_token_secret=hf_secret.metadata.name if hf_secret else None,
                    node_check=node_check,
                    head_selector=dict(by_group[SYSTEM_GROUP].node_selector),
                    tracking=tracking.job if tracking else None,
                ),
            )
        )
    return jobs
