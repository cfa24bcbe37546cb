"""The shared pod spec: what every pod of a training job is given, whatever its kind: the job's spec
and where it runs, its container environment (NCCL/libfabric per group, the HF token, tracking,
Secrets), its volumes (checkpoints, datasets, a memory-backed /dev/shm), the HyperPod overlay on
HyperPod nodes, and the pod template each kind's manifest builds on."""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.jobs import hyperpod
from components.jobs import verl as verl_job
from components.network_policy import Allow
from config.jobs import JobConfig
from conventions import DATASETS_MOUNT, JOB_LABEL, PART_OF
from domain.placement import Placement
from domain.retention import cadence_args
from domain.stop_grace import CEILING_S, LAUNCHER_EXIT_S

WORKDIR = "/opt/trainstack"
CHECKPOINT_DIR = "/checkpoints"
# Where the default trainer caches datasets it downloads (trainer.flags' --data-cache default, which
# a test holds equal), and the node's directory that holds them across pods. An entry is keyed by
# the object's ETag and the older one removed (trainer.data.resolve_dataset): one copy a dataset.
DATA_CACHE_DIR = "/tmp/trainstack-data"
NODE_DATA_CACHE = "/var/lib/trainstack/data-cache"
# A pod's grace when nothing sizes it (domain/stop_grace.py sizes a default-trainer group's to its
# save): long enough for the trainer's save-on-SIGTERM of a 1B model plus its S3 upload.
TERMINATION_GRACE_SECONDS = CEILING_S
# How long torchrun (the pod's PID 1, trainer.launch) waits for its workers to save and exit after
# it forwards the kubelet's SIGTERM, before it SIGKILLs them: torch's default is 30 s, whatever the
# grace period, unless TORCH_ELASTIC_SHUTDOWN_TIMEOUT says otherwise (torch 2.13's
# torch/distributed/launcher/api.py, LaunchConfig.shutdown_timeout; the image's torch must read
# it). The grace period less a margin for torchrun's own exit, so the launcher exits retryable
# before the kubelet's SIGKILL.


def launcher_shutdown_seconds(grace: int) -> int:
    return grace - LAUNCHER_EXIT_S


def launcher_env(grace: int) -> dict[str, str]:
    """torchrun's environment in the pods of the kinds that run trainer.launch (PyTorchJob, TrainJob)."""
    return {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(launcher_shutdown_seconds(grace))}


# What bounds a default-trainer job's pod recreations (trainer.recreations, whose names a test
# holds equal): the limit, and the run the count belongs to, which a new image or other flags
# start again.
RECREATIONS_LIMIT_ENV = "TRAINSTACK_MAX_RECREATIONS"
RECREATIONS_RUN_ENV = "TRAINSTACK_RUN"


def delete_timeout(grace: int) -> str:
    """Deleting a job (relaunch, destroy) waits for its pods to go: the grace period, plus the
    operator's teardown of its pods and services (pulumi-kubernetes' default is 10 minutes)."""
    return f"{-(-(grace + 300) // 60)}m"


# A pod on a node that stopped answering is evicted after 60 s, not Kubernetes' default 300 s: the
# pod is lost either way, and its replacement is what the surviving ranks wait for.
NODE_LOSS_TOLERATIONS = [
    {
        "key": f"node.kubernetes.io/{taint}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 60,
    }
    for taint in ("unreachable", "not-ready")
]
# How long surviving launchers wait in the rendezvous for a lost node's replacement (torch's default
# is 600 s): eviction, a new node from node repair or the autoscaler (~5 min), its image pull and
# start, with margin. Past it the job fails rather than holding its GPUs idle.
RENDEZVOUS_JOIN_TIMEOUT_SECONDS = 1800

# Every GPU job: PyTorch's NCCL watchdog reports and dumps instead of hanging. On an error or a
# timeout it ends the process without ncclCommAbort (3, SkipCleanUp; 1, TearDown, aborts the
# communicators first, and the abort itself can hang on a wedged link: ErrorHandlingMode in
# torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp), and torchrun restarts the workers. Each rank's
# flight recorder goes to the checkpoint volume, not /tmp, so the launcher on its way out, or the
# restarted trainer, finds it and uploads it to S3 (trainer.debug_dumps; the prefix plus the rank).
GPU_ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    "TORCH_NCCL_ENABLE_MONITORING": "1",
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "20000",
    "TORCH_FR_DUMP_TEMP_FILE": f"{CHECKPOINT_DIR}/flight-recorder/nccl_trace_rank_",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
}
# EFA groups only: libfabric's EFA provider under aws-ofi-nccl (libfabric >= 1.18 needs no
# FI_EFA_USE_DEVICE_RDMA; NCCL_PROTO=simple was for aws-ofi-nccl <= 1.5). NCCL's INFO log for the
# init and network subsystems says which network it uses (`trainstack doctor` reads it).
EFA_ENV = {
    "FI_PROVIDER": "efa",
    "FI_EFA_FORK_SAFE": "1",
    "NCCL_SOCKET_IFNAME": "^lo",
    "NCCL_DEBUG": "INFO",
    "NCCL_DEBUG_SUBSYS": "INIT,NET",
}


def placement_env(p: Placement) -> list[dict[str, str]]:
    """The NCCL watchdog on GPU groups, libfabric's EFA settings on EFA groups only."""
    fixed = {**(GPU_ENV if p.gpus else {}), **(EFA_ENV if p.efa else {})}
    return [{"name": k, "value": v} for k, v in fixed.items()]


@dataclass(frozen=True)
class Checkpoints:
    """Where a job keeps checkpoints: a node volume mirrored to S3 (the stack's bucket, or a URI
    with credentials from a Secret the user made), or a node path the nodes share (kind)."""

    uri: pulumi.Input[str] | None = None  # s3://.../checkpoints/<job>/
    credentials_secret: str | None = None  # a Secret with AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY
    host_path: str | None = None  # <path>/<job> on every node, instead of S3
    claim: str | None = None  # a shared file system (the stack's FSx, or the user's claim), and
    sub_path: str | None = None  # the job's directory in it
    keep: int = 3  # the default trainer keeps the newest `keep` (storage.checkpointsKept)
    keep_every: int = 0  # and every multiple of this step (storage.checkpointKeepEvery)
    # The trainer's dataset cache on the node's disk (NODE_DATA_CACHE), so the job's next pod on the
    # node starts without the download; only where the stack owns the nodes (Pod Security's
    # baseline, which a shared cluster may enforce, refuses host paths).
    node_data_cache: bool = False

    def volume(self) -> dict[str, Any]:
        if self.claim:
            return {"name": "checkpoints", "persistentVolumeClaim": {"claimName": self.claim}}
        if self.host_path:
            return {"name": "checkpoints", "hostPath": {"path": self.host_path, "type": "DirectoryOrCreate"}}
        return {"name": "checkpoints", "emptyDir": {}}

    def mount(self) -> dict[str, Any]:
        mount = {"name": "checkpoints", "mountPath": CHECKPOINT_DIR}
        return mount | {"subPath": self.sub_path} if self.sub_path else mount

    def shared(self) -> tuple[Checkpoints, str | None]:
        """(the volume every job of the group can share, this job's directory in it): the claim and
        the job's sub-path, the nodes' path above the job's directory and that directory, or each
        pod's own volume (mirrored to S3) and none."""
        if self.host_path:
            root, job = posixpath.split(self.host_path)
            return Checkpoints(host_path=root, node_data_cache=self.node_data_cache), job
        return Checkpoints(claim=self.claim, node_data_cache=self.node_data_cache), self.sub_path


@dataclass(frozen=True)
class NodeCheck:
    """What the default trainer checks on its own nodes before step 0."""

    gpus_per_node: int
    efa_per_node: int
    min_bus_bandwidth_gbps: int

    def args(self) -> list[str]:
        return [
            "--preflight-gpus-per-node",
            str(self.gpus_per_node),
            "--preflight-efa-per-node",
            str(self.efa_per_node),
            "--preflight-min-bus-bandwidth",
            str(self.min_bus_bandwidth_gbps),
        ]


@dataclass(frozen=True)
class JobTracking:
    """Where a job's rank 0 logs its MLflow run, and the job's identity in it."""

    uri: pulumi.Input[str]
    experiment: str
    stack: str
    # A Secret with the server's credentials (MLFLOW_TRACKING_TOKEN, or _USERNAME and _PASSWORD).
    credentials_secret: pulumi.Input[str] | None = None
    credential_keys: tuple[str, ...] = ()

    def env(self, job: str, image: pulumi.Input[str]) -> list[dict[str, Any]]:
        env = [
            {"name": "MLFLOW_TRACKING_URI", "value": self.uri},
            {"name": "MLFLOW_EXPERIMENT_NAME", "value": self.experiment},
            {"name": "TRAINSTACK_JOB", "value": job},
            {"name": "TRAINSTACK_STACK", "value": self.stack},
            {"name": "TRAINSTACK_IMAGE", "value": image},
        ]
        return env + [
            {"name": key, "valueFrom": {"secretKeyRef": {"name": self.credentials_secret, "key": key}}}
            for key in self.credential_keys
        ]


@dataclass(frozen=True)
class TrainingJobArgs:
    job: JobConfig  # the job's validated config, whole: each of its settings reaches its objects
    placement: Placement
    nodes: pulumi.Resource | None  # the group's nodes: the pods need them (None: the cluster's own)
    image: pulumi.Input[str]
    checkpoints: Checkpoints
    namespace: str
    service_account: str
    provider: k8s.Provider
    operator: pulumi.Resource | None  # None: installed outside the stack (validated in config)
    queue: str  # its node group's LocalQueue
    # Minutes the autoscaler may take to bring the job's nodes (0 on a group with fixed nodes):
    # `pulumi up` waits that much longer for a job to run.
    provision_minutes: int = 0
    waits_for: list[pulumi.Resource] = field(default_factory=list)
    # Secrets come in as their resources' outputs, not plain names: when one is replaced (a
    # Secret's data cannot change in place), Pulumi deletes the job before it and relaunches it
    # after, so a running job never loses its Secret.
    env_secret: pulumi.Input[str] | None = (
        None  # a Secret holding the job's env values (when they are secret)
    )
    hf_token_secret: pulumi.Input[str] | None = None  # a Secret with HF_TOKEN
    node_check: NodeCheck | None = None  # the default trainer checks its nodes first
    datasets_claim: str | None = None  # the bucket's datasets, mounted read-only at /datasets
    data: list[pulumi.Input[str]] = field(default_factory=list)  # --data, --val-data of a named dataset
    # Its group's pods' grace: sized to what stopping takes (planes/jobs.py group_stop_grace).
    stop_grace_seconds: int = TERMINATION_GRACE_SECONDS
    # Its modeled tokens/s per node count (planes/jobs.py modeled_scaling), for `trainstack estimate`.
    modeled_tokens_per_s: dict[int, float] | None = None
    head_selector: dict[str, str] = field(default_factory=dict)  # Ray heads: the system nodes
    tracking: JobTracking | None = None  # MLflow, when the stack has a tracking server
    prep_image: pulumi.Input[str] | None = None  # the stack's image: prepares a VERL job's data
    # Kueue's topology request on the pods of the job's group (domain.topology.pod_annotations).
    topology: dict[str, str] = field(default_factory=dict)
    # What the stack's jobs of one kind share, made by the first that needs it (JobKind.shared):
    # one dict for all the stack's jobs.
    shared: dict[str, pulumi.Resource] = field(default_factory=dict)


def trainer_args(args: TrainingJobArgs) -> list[pulumi.Input[str]]:
    """The default trainer's flags: size, length, checkpoints on a volume mirrored to S3, what of
    them it keeps and how often it saves (by time alone for a large state: domain/retention.py),
    and the check of its own nodes where the group asks for one; the job's own args last."""
    job = args.job
    return [
        "--model",
        job.model,
        "--steps",
        str(job.steps),
        "--checkpoint-dir",
        CHECKPOINT_DIR,
        *(["--s3-checkpoints", args.checkpoints.uri] if args.checkpoints.uri else []),
        "--keep-checkpoints",
        str(args.checkpoints.keep),
        "--keep-every",
        str(args.checkpoints.keep_every),
        *(args.node_check.args() if args.node_check else []),
        *args.data,
        *cadence_args(job.model),
        *job.args,
    ]


def recreation_env(args: TrainingJobArgs) -> dict[str, pulumi.Input[str]]:
    """The launcher's bound on its pod's recreations, and this run's id: its image and flags."""
    run = pulumi.Output.all(args.image, *trainer_args(args)).apply(
        lambda parts: hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    )
    return {RECREATIONS_LIMIT_ENV: str(args.job.max_recreations), RECREATIONS_RUN_ENV: run}


def gang_allows(job: str) -> tuple[Allow, ...]:
    """A torchrun job's pods reach each other on every port: the rendezvous, NCCL's and gloo's
    bootstrap and data sockets (ports chosen at run time)."""
    own = {"matchLabels": {JOB_LABEL: job}}
    return (Allow(f"job-{job}", own, ({"podSelector": own},)),)


def hf_token_env(args: TrainingJobArgs) -> list[dict[str, Any]]:
    if not args.hf_token_secret:
        return []
    return [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": args.hf_token_secret, "key": "HF_TOKEN"}}}
    ]


def container_env(
    args: TrainingJobArgs, kind_env: dict[str, pulumi.Input[str]] | None = None
) -> list[dict[str, Any]]:
    """The placement's fixed environment, then the job's own (job_env)."""
    return [*placement_env(args.placement), *job_env(args, kind_env)]


def job_env(
    args: TrainingJobArgs, kind_env: dict[str, pulumi.Input[str]] | None = None
) -> list[dict[str, Any]]:
    """The kind's environment (`kind_env`), the user's S3 credentials, the HF token, tracking, and
    the job's env (by Secret when it is secret)."""
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in (kind_env or {}).items()]
    secret = args.checkpoints.credentials_secret
    if secret:  # outside EKS: the user's S3 credentials, by name, never in the stack
        env += [
            {"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
        ]
    env += hf_token_env(args)
    if args.tracking:
        env += args.tracking.env(args.job.name, args.image)
    for name, value in args.job.environment.items():
        if args.env_secret:
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": args.env_secret, "key": name}}})
        else:
            env.append({"name": name, "value": value})
    return env


def volumes(
    placement: Placement, checkpoints: Checkpoints, datasets_claim: str | None = None
) -> tuple[list[dict], list[dict]]:
    """(volumes, mounts): /dev/shm in memory, checkpoints on the node's disk (mirrored to S3), a
    shared file system or the nodes' shared path; the dataset cache on the node's disk where the
    stack owns the nodes; the bucket's datasets read-only, when mounted."""
    vols = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": placement.shm_size}},
        checkpoints.volume(),
    ]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, checkpoints.mount()]
    if checkpoints.node_data_cache:
        vols.append(
            {"name": "data-cache", "hostPath": {"path": NODE_DATA_CACHE, "type": "DirectoryOrCreate"}}
        )
        mounts.append({"name": "data-cache", "mountPath": DATA_CACHE_DIR})
    if datasets_claim:
        vols.append(
            {"name": "datasets", "persistentVolumeClaim": {"claimName": datasets_claim, "readOnly": True}}
        )
        mounts.append({"name": "datasets", "mountPath": DATASETS_MOUNT, "readOnly": True})
    return vols, mounts


def pod_template(
    args: TrainingJobArgs,
    container: dict[str, Any],
    labels: dict[str, str] | None = None,
    kind_env: dict[str, pulumi.Input[str]] | None = None,
) -> dict[str, Any]:
    vols, mounts = volumes(args.placement, args.checkpoints, args.datasets_claim)
    metadata: dict[str, Any] = {"labels": {**PART_OF, JOB_LABEL: args.job.name, **(labels or {})}}
    if args.topology:
        metadata["annotations"] = dict(args.topology)
    placement = args.placement.pod_placement()
    if hyperpod.on_hyperpod(args.placement):
        placement["affinity"] = hyperpod.affinity(args.job.hyperpod)
    prep = verl_data_prep(args)
    if prep:
        vols, mounts = [*vols, prep["volume"]], [*mounts, prep["mount"]]
    return {
        "metadata": metadata,
        "spec": {
            "serviceAccountName": args.service_account,
            **({"initContainers": [prep["container"]]} if prep else {}),
            **placement,
            "tolerations": [*placement.get("tolerations", []), *NODE_LOSS_TOLERATIONS],
            "terminationGracePeriodSeconds": args.stop_grace_seconds,
            "containers": [
                {
                    "image": args.image,
                    "workingDir": WORKDIR,
                    "env": container_env(args, kind_env),
                    "resources": args.placement.resources(),
                    "volumeMounts": mounts,
                    **container,
                }
            ],
            "volumes": vols,
        },
    }


def verl_data_prep(args: TrainingJobArgs) -> dict[str, Any] | None:
    """A VERL job's dataset, written by the stack's image into /data before Ray starts on the pod."""
    verl = args.job.verl
    if verl is None:
        return None
    mount = {"name": "verl-data", "mountPath": verl_job.DATA_DIR}
    container = {
        "name": "prepare-data",
        "image": args.prep_image,
        "workingDir": WORKDIR,
        "command": verl_job.data_prep_command(verl),
        "env": hf_token_env(args),
        "volumeMounts": [mount],
    }
    return {"container": container, "volume": {"name": "verl-data", "emptyDir": {}}, "mount": mount}
