"""Jobs plane: each configured PyTorchJob, TrainJob, RayJob or RayCluster, through its group's queue, as its
own service account, with its Secrets, checkpoints, datasets and tracking; and the NetworkPolicies
that let each job's pods, and them only, reach one another and the tracking server."""

from __future__ import annotations

from components.datasets import DatasetPreparation
from components.driver_probe import DriverProbe, DriverProbeArgs
from components.jobs.kinds import KINDS
from components.jobs.pods import TERMINATION_GRACE_SECONDS, NodeCheck, TrainingJobArgs
from components.jobs.training_job import TrainingJob
from components.network_policy import NamespacePolicies, NamespacePoliciesArgs, tracking_allows
from components.operators import ClusterOperators
from components.queueing import Queueing
from components.tracking_users import PROVISIONER_SELECTOR
from config import StackConfig
from config.placements import group_network_layers
from conventions import (
    DEFAULT_DENY_POLICY,
    HF_TOKEN_SECRET,
    JOB_LABEL,
    PART_OF,
    SYSTEM_GROUP,
    in_shared_namespace,
)
from domain.goodput import CheckpointPath
from domain.model_facts import MODEL_SHAPES
from domain.names import IAM_ROLE_NAME_MAX, JOB_NAME_MAX, PROJECT, eks_cluster_name, fit, node_group_name
from domain.step_time import Link
from domain.stop_grace import stop_grace_s
from domain.throughput import modeled_tokens_per_s, node_counts
from domain.topology import default_placement, pod_annotations
from planes.build import BuildPlane
from planes.compute import ComputePlane
from planes.storage import SharedStorage, checkpoint_home, checkpoints, storage_claims
from planes.tracking import Tracking


def owned_name(cfg: StackConfig, name: str) -> str:
    """A fixed name of the stack's in its training namespace: as it is where the stack owns the
    namespace, with the stack's name where the namespace may be the owner's (a cluster the stack
    did not create)."""
    return in_shared_namespace(cfg.stack, name) if cfg.existing_cluster.named else name


def probes_driver(cfg: StackConfig, node_group: str) -> bool:
    """Whether a job on `node_group` is cleared by a driver probe first: a GPU group's are."""
    return any(g.name == node_group and g.gpu for g in cfg.gpu_node_groups)


def driver_probe_name(cfg: StackConfig, job: str) -> str:
    """The Job that clears `job`'s node group's driver (components/driver_probe.py)."""
    return fit(owned_name(cfg, f"{job}-driver"), JOB_NAME_MAX)


def driver_fix(cfg: StackConfig, group: str) -> str:
    """Where a GPU group's nodes get their AMI, and so their driver, as a sentence names it."""
    g = next(g for g in cfg.gpu_node_groups if g.name == group)
    if g.hyperpod:
        return "HyperPod's AMI for that instance group: aws sagemaker update-cluster-software"
    if cfg.existing_cluster.named:
        return "the cluster's own node group that the group's nodeSelector selects"
    cluster = eks_cluster_name(cfg.stack)
    return (
        "a node group takes EKS's newest AL2023 NVIDIA AMI when made; to move a running one: aws eks "
        f"update-nodegroup-version --cluster-name {cluster} --nodegroup-name {node_group_name(cluster, group)}"
    )


def training_policies(cfg: StackConfig, compute: ComputePlane, deny_pods: dict | None) -> NamespacePolicies:
    """The training namespace's deny, over `deny_pods` (None: every pod), and each job's own flows."""
    pods = compute.pod_identity
    return NamespacePolicies(
        "training-network",
        NamespacePoliciesArgs(
            compute.provider,
            pods.namespace_name,
            pods.namespace,
            tuple(a for j in cfg.jobs for a in KINDS[j.kind].allows(j.name)),
            deny_name=owned_name(cfg, DEFAULT_DENY_POLICY),
            deny_pods=deny_pods,
        ),
    )


def network_policies(
    cfg: StackConfig, compute: ComputePlane, tracking: Tracking | None
) -> list[NamespacePolicies]:
    """Default-deny ingress in the training namespace with each job's own flows allowed, and in the
    tracking namespace (a server the stack runs) with the server open to the jobs. In a namespace
    the stack does not own, the deny carries the stack's name and selects the stack's jobs' pods only
    (none without jobs: no deny there)."""
    pods = compute.pod_identity
    found = []
    if not cfg.existing_cluster.named:
        found.append(training_policies(cfg, compute, deny_pods=None))
    elif cfg.jobs:  # the stack's own pods, its jobs' (each labelled with its job); none: nothing to deny
        jobs = {"key": JOB_LABEL, "operator": "In", "values": sorted(j.name for j in cfg.jobs)}
        found.append(
            training_policies(
                cfg, compute, deny_pods={"matchLabels": dict(PART_OF), "matchExpressions": [jobs]}
            )
        )
    server = tracking.server if tracking else None
    if server is not None:
        found.append(
            NamespacePolicies(
                "tracking-network",
                NamespacePoliciesArgs(
                    compute.provider,
                    server.namespace_name,
                    server.namespace,
                    tracking_allows(
                        pods.namespace_name,
                        server.server_selector,
                        server.port,
                        server.database_selector,
                        server.database_port,
                        PROVISIONER_SELECTOR,
                    ),
                ),
            )
        )
    return found


def job_tokens_per_s(group, job, nodes: int) -> float | None:
    """A default-trainer job's modeled tokens/s on `nodes` nodes of its GPU group (the plan's model)."""
    instance, run = group.instance, job.trainer_run()
    return modeled_tokens_per_s(
        job.model, run.batch_size, run.seq_len, instance.gpu_model or "", instance.gpus,
        Link(instance.baseline_gbps, group.efa), run.compiled, run.float8, nodes,
    )  # fmt: skip


def group_stop_grace(cfg: StackConfig, group_name: str) -> int:
    """The grace of a group's job pods: the longest stop any of its jobs needs (domain/stop_grace.py),
    one value for the group, whose TrainJobs share a runtime. The ceiling where the model does not
    know a job (a command, VERL, a CPU group) or where checkpoints go to a shared file system."""
    group = next((g for g in cfg.gpu_node_groups if g.name == group_name), None)
    on_group = [j for j in cfg.jobs if j.node_group == group_name]
    home = checkpoint_home(cfg, group_name)
    if group is None or not group.instance.has_nvidia_gpus or home not in ("s3", "host_path"):
        return TERMINATION_GRACE_SECONDS
    if group.instance.baseline_gbps <= 0:  # no figure to size an upload by
        return TERMINATION_GRACE_SECONDS
    if not on_group or not all(j.runs_default_trainer for j in on_group):
        return TERMINATION_GRACE_SECONDS
    instance = group.instance
    path = CheckpointPath(group.checkpoint_disk.write_gb_per_s, instance.baseline_gbps, uploads=home == "s3")
    graces = []
    for j in on_group:
        run, nodes = j.trainer_run(), max(1, j.nodes)
        tokens_per_s = job_tokens_per_s(group, j, nodes)
        step_s = run.batch_size * run.seq_len * nodes * instance.gpus / tokens_per_s if tokens_per_s else 0.0
        graces.append(
            stop_grace_s(
                MODEL_SHAPES[j.model],
                nodes * instance.gpus,
                instance.gpus,
                path,
                run.collective_timeout_s,
                agreement_s=run.log_every * step_s,
            )
        )
    return max(graces)


def modeled_scaling(cfg: StackConfig, job) -> dict[int, float] | None:
    """The job's modeled tokens/s on 1, 2, 4, ... nodes of its group, up to the group's size: what
    `trainstack estimate` scales a measurement by. None where the model does not know the job."""
    group = next((g for g in cfg.gpu_node_groups if g.name == job.node_group), None)
    if group is None or not job.runs_default_trainer or not group.instance.has_nvidia_gpus:
        return None
    found = {n: job_tokens_per_s(group, job, n) for n in node_counts(max(group.node_count, job.nodes))}
    return None if None in found.values() else {n: v for n, v in found.items() if v is not None}


def jobs_plane(
    cfg: StackConfig,
    build: BuildPlane,
    compute: ComputePlane,
    operators: ClusterOperators,
    queues: Queueing,
    tracking: Tracking | None,
    datasets: dict[str, DatasetPreparation],
    storage: SharedStorage | None,
) -> list[TrainingJob]:
    pods, provider = compute.pod_identity, compute.provider
    hf_secret = None
    if cfg.hf_token is not None:
        hf_secret = pods.secret(owned_name(cfg, HF_TOKEN_SECRET), {"HF_TOKEN": cfg.hf_token})
    by_group = compute.placements
    groups = {g.name: g for g in cfg.gpu_node_groups}
    # A job starts once its flows are allowed: the deny never cuts its rendezvous.
    policies = [p for n in network_policies(cfg, compute, tracking) for p in n.policies]
    jobs = []
    shared: dict = {}  # a TrainJob group's runtime, made once (JobKind.shared)
    for j in cfg.jobs:
        env_secret = None
        if j.environment and cfg.secret_job_env:
            env_secret = pods.secret(f"{j.name}-env", j.environment)
        placement = by_group[j.node_group]
        group = groups.get(j.node_group)
        node_check = None
        if group is not None and group.checks_efa:
            node_check = NodeCheck(placement.gpus, placement.efa, group.min_bus_bandwidth_gbps)
        provisioned = group is not None and cfg.autoscaled(group)
        layers = group_network_layers(cfg, group) if group is not None else 0
        topology = pod_annotations(j.placement or default_placement(placement.efa > 0), layers)
        identity = pods.job_identity(
            j.name,
            fit(f"{PROJECT}-{cfg.stack}-job-{j.name}", IAM_ROLE_NAME_MAX),
            j.s3_read,
            cfg.tracking.sagemaker_arn,
        )
        # Device plugins: a job's pods need the GPUs and EFA interfaces advertised.
        extra = [
            r for r in (hf_secret, env_secret, identity.ready, *operators.device_plugins, *policies) if r
        ]
        extra += storage_claims(storage)
        # A job naming a dataset starts on prepared files: pulumi-kubernetes awaits the Job's Complete.
        data = datasets[j.dataset] if j.dataset else None
        extra += [data.job] if data else []
        image = j.image or (build.verl_image_uri if j.verl else build.image_uri)
        if probes_driver(cfg, j.node_group):  # its nodes' driver, before the job is registered
            probe = DriverProbe(
                f"driver-{j.name}",
                DriverProbeArgs(
                    job=j.name,
                    name=driver_probe_name(cfg, j.name),
                    placement=placement,
                    image=image,
                    namespace=pods.namespace_name,
                    provider=provider,
                    timeout_minutes=(cfg.queueing.max_node_provision_minutes if provisioned else 0)
                    + cfg.queueing.pods_ready_timeout_minutes,
                    fix=driver_fix(cfg, j.node_group),
                    waits_for=[
                        *operators.device_plugins,
                        *filter(None, [compute.group_nodes.get(j.node_group)]),
                    ],
                ),
            )
            extra.append(probe.job)
        job_tracking = tracking.for_job(j.name, pods.secret, policies) if tracking else None
        jobs.append(
            TrainingJob(
                f"job-{j.name}",
                TrainingJobArgs(
                    job=j,
                    placement=placement,
                    nodes=compute.group_nodes.get(j.node_group),
                    image=image,
                    prep_image=build.image_uri,
                    checkpoints=checkpoints(cfg, build, storage, j.node_group, j.name),
                    datasets_claim=storage.datasets.claim_name if storage and storage.datasets else None,
                    data=data.trainer_args() if data else [],
                    namespace=pods.namespace_name,
                    service_account=identity.service_account_name,
                    provider=provider,
                    operator=KINDS[j.kind].operator(operators),
                    queue=j.node_group,
                    provision_minutes=cfg.queueing.max_node_provision_minutes if provisioned else 0,
                    waits_for=[queues.local_queues[j.node_group], *extra],
                    env_secret=env_secret.metadata.name if env_secret else None,
                    hf_token_secret=hf_secret.metadata.name if hf_secret else None,
                    node_check=node_check,
                    head_selector=dict(by_group[SYSTEM_GROUP].node_selector),
                    tracking=job_tracking,
                    topology=topology,
                    shared=shared,
                    stop_grace_seconds=group_stop_grace(cfg, j.node_group),
                    modeled_tokens_per_s=modeled_scaling(cfg, j),
                ),
            )
        )
    return jobs
