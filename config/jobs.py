"""Jobs plane config: the PyTorchJobs, TrainJobs, RayJobs and RayClusters the stack launches, and their own rules.

Whether a job fits its node group and has its operator is a cross-plane rule (`checks.py`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from config import trainer_args
from config.names import LABEL, NAME_RULE
from config.node_groups import GpuNodeGroupConfig
from config.schema import Reader, setting
from config.trainer_args import TrainerRun
from domain.catalog import SAGEMAKER_PREFIX
from domain.job_kinds import KINDS, RAY_KINDS
from domain.topology import JobPlacement
from stack_outputs import JobKind

WaitMode = Literal["none", "admitted", "running", "succeeded"]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Names whose values are credentials by convention (AWS_SECRET_ACCESS_KEY, CLIENT_SECRET, HF_TOKEN,
# DB_PASSWORD, WANDB_API_KEY); *_KEY_ID names an identifier (AWS_ACCESS_KEY_ID) and is not one.
SECRET_LOOKING_NAME = re.compile(r"(?:^|_)SECRET|(?:^|_)(?:TOKEN|PASSWORD|PASSWD|KEY)$", re.IGNORECASE)


# HyperPod restarts a faulted job after replacing its node at most this often.
MAX_AUTO_RESUME_RETRIES = 100


@dataclass(frozen=True)
class HyperPodJobConfig:
    """A job on SageMaker HyperPod nodes: they always require `node-health-status: Schedulable`."""

    deep_health_check: Literal["preferred", "required"] = setting(
        "deepHealthCheck",
        "Nodes that passed HyperPod's deep health checks (DCGM, NCCL): preferred, or required (a job "
        "then waits for such nodes).",
        "preferred",
    )
    # HyperPod's CLI defaults to 1 (`--max-retry`); a run of days meets more than one node fault.
    max_retries: int = setting(
        "maxRetries",
        "PyTorchJob: how often HyperPod's auto-resume restarts the job after it replaces a faulty node "
        "(1-100); each restart resumes from the newest checkpoint.",
        3,
    )


@dataclass(frozen=True)
class JobConfig:
    name: str = setting("name", "Job name (Kubernetes name; at most 47 for Ray kinds).")
    kind: JobKind = setting("kind", "What to launch.")
    node_group: str = setting(
        "nodeGroup", "GPU node group the job runs on, or `system` for a CPU-only (gloo) job."
    )
    nodes: int = setting("nodes", "Nodes the job uses (at most the group's nodeCount).", 1)
    model: Literal["tiny", "small", "1b"] = setting("model", "Model size the default trainer trains.", "tiny")
    steps: int = setting("steps", "Optimizer steps of the default trainer (1-10000000).", 100)
    image: str | None = setting("image", "Container image (default: the image the stack builds).", None)
    command: tuple[str, ...] = setting(
        "command", "Container command (default: the workload's trainer for the kind).", factory=tuple
    )
    args: tuple[str, ...] = setting(
        "args",
        "Arguments appended to the trainer's (or to `command`). The default trainer's are read by its own "
        "parser at plan time: an unknown flag, a value it refuses, or a flag the stack sets (--model, "
        "--steps, checkpoints, torchrun's) is refused.",
        factory=tuple,
    )
    dataset: str | None = setting(
        "dataset",
        "A dataset of `datasets` to train on: the job gets --data and --val-data at its files in the "
        "bucket, and waits for their preparation.",
        None,
    )
    s3_read: tuple[str, ...] = setting(
        "s3Read",
        "Other S3 locations of yours the job may read (s3://bucket or s3://bucket/prefix/), read-only, in "
        "the job's own Pod Identity role; its args may then name them. A bucket encrypted with its own KMS "
        "key also needs kms:Decrypt on that key, which the stack does not grant.",
        factory=tuple,
    )
    env: dict[str, str] = setting(
        "env",
        "Extra environment variables (kept in a Kubernetes Secret if `jobs` is a secret); names that "
        "look secret (*SECRET*, *_TOKEN, *_PASSWORD, *_KEY) belong in secretEnv.",
        factory=dict,
    )
    secret_env: dict[str, str] = setting(
        "secretEnv",
        "Secret environment variables, name to value, each set with `pulumi config set --secret --path "
        "'jobs[<i>].secretEnv.<NAME>' <value>` (which makes the whole `jobs` key a secret); given to the "
        "job through its Kubernetes Secret.",
        factory=dict,
    )
    wait: WaitMode = setting(
        "wait",
        "What `pulumi up` waits for: admitted (Kueue admitted it whole and its nodes exist; not a RayJob, "
        "whose admission leaves nothing to watch), running, succeeded, or none. Where the job's queue "
        "cannot hold all its jobs at once, only none (or succeeded, unless a RayCluster shares it).",
        "running",
    )
    timeout_minutes: int = setting(
        "timeoutMinutes",
        "How long `pulumi up` waits (1-10080), plus queueing.maxNodeProvisionMinutes on an autoscaled group.",
        60,
    )
    placement: JobPlacement | None = setting(
        "placement",
        "Where in the EC2 network its nodes may be, on a group whose instance type EKS labels with its "
        "network place (p4d, p5, p6-b200, g6e, trn...): required (one network node above the bottom "
        "layer for the whole gang, or Kueue does not admit it), preferred (the bottom layer's, or as "
        "close as the nodes allow) or any (default: preferred on EFA groups, any elsewhere).",
        None,
    )
    verl: VerlConfig | None = setting(
        "verl", "Run VERL (GRPO/PPO) instead of the default trainer: RayJob or RayCluster only.", None
    )
    max_recreations: int = setting(
        "maxRecreations",
        "How often a failing job is started again before it fails (0-100). PyTorchJob or TrainJob "
        "running the default trainer: times a pod may be recreated after a retryable exit (a signal, "
        "an OOM kill, a lost node; a TrainJob's whole gang) without a newer checkpoint; RayJob (VERL "
        "too): KubeRay's backoffLimit, attempts on a new Ray cluster, each failed one counted, progress "
        "or not. A `command:` and a RayCluster are not bounded by it.",
        2,
    )
    hyperpod: HyperPodJobConfig = setting(
        "hyperpod",
        "On a HyperPod group (an `ml.` instance type): its health checks and auto-resume for this job.",
        factory=HyperPodJobConfig,
    )

    @property
    def environment(self) -> dict[str, str]:
        """Everything the job's containers are given: env and secretEnv (the rules keep their names
        apart, and secretEnv only in a secret `jobs`, whose values all go to the job's Secret)."""
        return {**self.env, **self.secret_env}

    @property
    def runs_default_trainer(self) -> bool:
        """The stack's trainer runs (not a command, VERL or a bare RayCluster): the plan can size it."""
        return not self.command and self.verl is None and not KINDS[self.kind].bare

    def trainer_run(self) -> TrainerRun:
        """The default trainer's run as its own parser reads `args` after the stack's flags (its
        batch, length, checkpoint cadence, float8). Raises ArgsRefused where the trainer would refuse."""
        return trainer_args.read(self.model, self.steps, self.args, ray=KINDS[self.kind].ray)


def check_job_name(j: JobConfig, k: str, r: Reader) -> None:
    limit = KINDS[j.kind].max_name
    if not LABEL.fullmatch(j.name) or len(j.name) > limit:
        r.problem(
            f"{k}.name", j.name, f"not a valid {j.kind} name", f"{NAME_RULE}; at most {limit} characters"
        )


def check_job_run(j: JobConfig, k: str, r: Reader) -> None:
    """What the job runs: steps and image, and how HyperPod resumes it."""
    if not 1 <= j.steps <= 10_000_000:
        r.problem(f"{k}.steps", j.steps, "out of range", "1-10000000")
    if j.image is not None and (not j.image.strip() or any(c.isspace() for c in j.image)):
        r.problem(f"{k}.image", j.image, "not an image reference", "registry/repository:tag or @sha256:...")
    if not 0 <= j.max_recreations <= 100:
        r.problem(f"{k}.maxRecreations", j.max_recreations, "out of range", "0-100")
    h = j.hyperpod
    if not 1 <= h.max_retries <= MAX_AUTO_RESUME_RETRIES:
        r.problem(f"{k}.hyperpod.maxRetries", h.max_retries, "out of range", f"1-{MAX_AUTO_RESUME_RETRIES}")
    elif not KINDS[j.kind].hyperpod_auto_resume and h.max_retries != HyperPodJobConfig().max_retries:
        r.problem(
            f"{k}.hyperpod.maxRetries",
            h.max_retries,
            f"HyperPod auto-resumes PyTorchJobs only, not a {j.kind}",
            "unset",
        )


def check_job_hyperpod(j: JobConfig, group: GpuNodeGroupConfig, k: str, r: Reader) -> None:
    """`hyperpod` settings on a job whose group is not HyperPod's would be ignored: refused."""
    if j.hyperpod != HyperPodJobConfig() and not group.hyperpod:
        r.problem(
            f"{k}.hyperpod",
            "(set)",
            f"node group '{j.node_group}' ({group.instance_type}) is not a HyperPod group",
            f"unset, or a group whose instanceType starts with {SAGEMAKER_PREFIX}",
        )


def check_job_topology(j: JobConfig, layers: int, instance_type: str, k: str, r: Reader) -> None:
    """`placement` asks Kueue for a network level only the labelled nodes of a created cluster have."""
    if j.placement in ("required", "preferred") and not layers:
        r.problem(
            f"{k}.placement",
            j.placement,
            f"node group '{j.node_group}' ({instance_type or 'system nodes'}) has no network topology "
            "labels the stack knows (an instance type EC2 describes the topology of, on a cluster the "
            "stack creates)",
            "any, or unset",
        )


def check_job_env_and_wait(j: JobConfig, k: str, r: Reader) -> None:
    shown = {
        **{("env", n): v for n, v in j.env.items()},
        **{("secretEnv", n): "(secret)" for n in j.secret_env},
    }
    for (field, name), value in shown.items():
        if not _ENV_NAME.fullmatch(name):
            r.problem(
                f"{k}.{field}.{name}",
                value,
                "not a valid environment variable name",
                "letters, digits and '_', not starting with a digit",
            )
    for name in j.env:
        if name in j.secret_env:
            r.problem(f"{k}.env.{name}", "(plain text)", "also set in secretEnv", "one of env and secretEnv")
    if not 1 <= j.timeout_minutes <= 10080:
        r.problem(f"{k}.timeoutMinutes", j.timeout_minutes, "out of range", "1-10080 (one week)")
    waits = KINDS[j.kind].waits
    if j.wait != "none" and j.wait not in waits:
        r.problem(
            f"{k}.wait", j.wait, f"`pulumi up` cannot watch a {j.kind} reach it", " | ".join(("none", *waits))
        )


# KubeRay sets these on every Ray pod for token auth, and only where the container has not
# (kuberay common/pod.go SetContainerTokenAuthEnvVars): a job's own value would turn auth off.
RAY_AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_ENABLE_K8S_TOKEN_AUTH")


def check_job_ray_auth_env(j: JobConfig, k: str, r: Reader) -> None:
    if j.kind not in RAY_KINDS:
        return
    for name in [*j.env, *j.secret_env]:
        if name in RAY_AUTH_ENV:
            key = "secretEnv" if name in j.secret_env else "env"
            r.problem(
                f"{k}.{key}.{name}",
                "(set)",
                "KubeRay sets it for the Ray cluster's token auth; a job's own value would override it",
                "unset",
            )


def secret_env_command(k: str, name: str) -> str:
    return f"pulumi config set --secret --path '{k.partition(':')[2]}.secretEnv.{name}' <value>"


def check_job_secret_env(j: JobConfig, jobs_secret: bool, k: str, r: Reader) -> None:
    """Secrets only in a secret `jobs` key: Pulumi encrypts a key whole or not at all, and one
    `--secret --path` value makes the whole key a secret (the offline plan reads it so too,
    offline/stack_file.py read_stack_file); its env values then all go to the job's Secret. In a plain
    `jobs` key, secretEnv and a secret-looking env name would be written in clear into the
    manifests and the state."""
    if jobs_secret:
        return
    for name in j.secret_env:
        r.problem(
            f"{k}.secretEnv.{name}",
            "(plain text)",
            "stored unencrypted: the `jobs` key is not a secret",
            secret_env_command(k, name),
        )
    for name in j.env:
        if SECRET_LOOKING_NAME.search(name) and name not in j.secret_env:
            r.problem(
                f"{k}.env.{name}",
                "(plain text)",
                "a secret-looking name with a plain value",
                f"{k}.secretEnv.{name}: {secret_env_command(k, name)}",
            )


@dataclass(frozen=True)
class VerlConfig:
    """RL post-training with VERL on a RayJob or RayCluster (see components/jobs/verl.py)."""

    algorithm: Literal["grpo", "ppo"] = setting(
        "algorithm", "GRPO (no critic) or PPO (a critic of the same model).", "grpo"
    )
    model: str = setting(
        "model", "Hugging Face model id the policy starts from.", "Qwen/Qwen2.5-0.5B-Instruct"
    )
    model_billions: float = setting(
        "modelBillions", "The model's parameters in billions (default: read from its name, e.g. 0.5B).", 0.0
    )
    dataset: Literal["gsm8k"] = setting(
        "dataset", "Public dataset, prepared on each node before Ray starts.", "gsm8k"
    )
    epochs: int = setting("epochs", "Passes over the dataset (1-100).", 1)
    batch_size: int = setting("batchSize", "Prompts per step (data.train_batch_size).", 256)
    rollouts: int = setting("rollouts", "Responses per prompt (GRPO's group size; 1-64).", 5)
    tensor_parallel: int = setting(
        "tensorParallel", "vLLM rollout tensor parallelism, dividing the GPUs per node.", 1
    )
    save_every: int = setting("saveEvery", "Steps between checkpoints in /checkpoints (1-100000).", 20)

    def billions(self) -> float:
        """Parameters in billions: as given, or the `<n>B` in the model's name (0: unknown)."""
        if self.model_billions:
            return self.model_billions
        found = re.search(r"(\d+(?:\.\d+)?)[Bb](?![a-z])", self.model.rsplit("/", 1)[-1])
        return float(found.group(1)) if found else 0.0
