"""Value rules over a whole `StackConfig`: each plane's own checks, in plane order, and the rules
that span planes (a job's node group exists and holds it, its operator is installed, it fits its
queue's quota)."""

from __future__ import annotations

import math
from collections import Counter

from config.build import check_image, check_registry, check_storage
from config.ci import check_ci
from config.cluster import check_cluster
from config.datasets import check_datasets, check_job_s3_args, check_job_s3_read
from config.existing import check_existing_cluster
from config.job_inputs import check_build_context, check_job_command, check_job_mount_paths
from config.jobs import (
    JobConfig,
    check_job_env_and_wait,
    check_job_hyperpod,
    check_job_name,
    check_job_ray_auth_env,
    check_job_run,
    check_job_secret_env,
    check_job_topology,
)
from config.names import PROJECT
from config.network import check_network
from config.node_groups import GpuNodeGroupConfig, check_node_groups
from config.operators import OperatorsConfig, check_manifest_mirror, check_operators
from config.placements import catalog_placement, config_system_placement, group_network_layers
from config.queueing import check_queueing
from config.schema import Reader
from config.stack_config import StackConfig
from config.tracking import check_tracking
from config.trainer_args import ArgsRefused
from config.trainer_args import flags as trainer_flags
from conventions import SYSTEM_GROUP
from domain.catalog import image_compressed_gb, image_pull_minutes
from domain.job_kinds import KINDS, RAY_KINDS
from domain.memory_fit import JobShape, gpu_fit_problem, staging_problem
from domain.model_facts import has_bf16_tensor_cores, has_float8_tensor_cores
from domain.node_health import AUTOSCALER_NODE_STARTUP_MINUTES, DCGM_LEVELS, startup_flag
from domain.quota import QueueSpec, combined, job_demand, shortfall
from domain.verl_fit import verl_fits

_TAG_PUNCTUATION = set(" _.:/=+-@")


def _check_sagemaker_mlflow(c: StackConfig, r: Reader) -> None:
    """A SageMaker MLflow ARN is reached with the pods' AWS identity, through the training image's
    plugin: not from a kubeconfig stack (its pods have no AWS identity) nor from the VERL image
    (built without the plugin)."""
    arn = c.tracking.sagemaker_arn
    if arn is None:
        return
    if not c.existing_cluster.uses_aws:
        r.problem(
            f"{PROJECT}:tracking.uri",
            arn,
            "a kubeconfig stack's pods have no AWS identity to sign SageMaker's MLflow calls with",
            "an https:// MLflow server",
        )
    for i, j in enumerate(c.jobs):
        if j.verl:
            r.problem(
                f"{PROJECT}:jobs[{i}].verl",
                j.name,
                "the VERL image has no sagemaker-mlflow plugin, so it cannot log to tracking.uri's ARN",
                "an https:// MLflow server as tracking.uri, or the job without verl",
            )


def check(c: StackConfig, r: Reader) -> None:
    """Value and cross-field rules. They run on every value that parsed (a malformed one keeps its
    default); problems about a malformed key, or rules leaning on malformed groups, stay quiet."""
    checks = Reader()
    groups_sound = not any(
        r.under_malformed(k) or k.startswith((f"{PROJECT}:gpuNodeGroups", f"{PROJECT}:cluster"))
        for k in r.malformed_keys
    )
    _check_values(c, checks, groups_sound)
    r.problems += [p for p in checks.problems if not r.under_malformed(p.key)]


def _check_values(c: StackConfig, r: Reader, groups_sound: bool) -> None:
    _check_tags(c.tags, r)
    check_network(c.network, r)
    check_existing_cluster(c.existing_cluster, r)
    check_cluster(c.cluster, r)
    check_node_groups(c.gpu_node_groups, c.region, c.existing_cluster.named, r)
    _check_builder(c, r)
    by_name = {g.name: g for g in c.gpu_node_groups} if groups_sound else None
    check_datasets(c.datasets, c.existing_cluster.uses_aws, r)
    _check_jobs(c, by_name, r)
    check_image(c.image, c.docker_hub_access_token is not None, r)
    if c.image.builder != "none":
        check_build_context(c.image.context, c.image.source_repository, r)
    check_operators(c.operators, r)
    check_manifest_mirror(c.operators, any(g.hyperpod for g in c.gpu_node_groups), r)
    check_queueing(c.queueing, r)
    _check_pods_ready(c, r)
    _check_health(c, r)
    check_tracking(
        c.tracking, c.tracking_token is not None, c.tracking_password is not None, c.existing_cluster.named, r
    )
    _check_sagemaker_mlflow(c, r)
    check_ci(c.ci, r)
    check_registry(c.registry, c.storage.protect, r)
    check_storage(c.storage, r)
    _check_shared_storage(c, r)


def _check_pods_ready(c: StackConfig, r: Reader) -> None:
    """Kueue evicts and requeues a job whose pods are not all ready in time: on a node that exists,
    they need at least the image pull and a minute to start and check their node."""
    pull = image_pull_minutes(image_compressed_gb(c.image.base_image))
    floor = math.ceil(pull + 1)
    given = c.queueing.pods_ready_timeout_minutes
    if 1 <= given < floor:
        r.problem(
            f"{PROJECT}:queueing.podsReadyTimeoutMinutes",
            given,
            f"shorter than the ~{pull:.1f} min pull of the image on {c.image.base_image} plus a minute to "
            "start: Kueue would evict every job before it could run",
            f"{floor} or more",
        )


def _why_no_gate(c: StackConfig, g: GpuNodeGroupConfig) -> str | None:
    """Why a group's health gate cannot run here; None where it can."""
    if c.existing_cluster.named:
        return (
            "the health gate runs on clusters the stack created (HyperPod gates its nodes with its own deep "
            "health checks; another cluster's nodes are its owner's)"
        )
    if not g.gpu:
        return "a CPU group has no GPUs to check"
    if c.image.builder == "none":
        return "the gate runs in the stack's image, and image.builder is none"
    if not c.cluster.node_monitoring_agent:
        return (
            "the gate asks the node monitoring agent's DCGM host engine and reads its conditions, and "
            "cluster.nodeMonitoringAgent is false"
        )
    return None


def _check_health(c: StackConfig, r: Reader) -> None:
    """A group's health gate runs where it can, with a DCGM level and floor in range, and a burn-in
    that ends before the cluster autoscaler gives up on the node it added (it scales up again once a
    node it added is not ready after its fixed 15 minutes) and before Kueue evicts the job waiting
    for it."""
    pull = image_pull_minutes(image_compressed_gb(c.image.base_image))
    for i, g in enumerate(c.gpu_node_groups):
        k, health = f"{PROJECT}:gpuNodeGroups[{i}].health", g.health
        if health.dcgm_level is not None and health.dcgm_level not in DCGM_LEVELS:
            r.problem(f"{k}.dcgmLevel", health.dcgm_level, "not a DCGM diagnostics level", "1, 2, 3 or 4")
        if not 0.5 <= health.floor_fraction <= 0.95:
            r.problem(f"{k}.floorFraction", health.floor_fraction, "out of range", "0.5-0.95")
        cannot = None if health.mode in (None, "off") else _why_no_gate(c, g)
        if cannot:
            r.problem(f"{k}.mode", health.mode, cannot, "off")
            continue
        level = c.dcgm_level(g)
        if c.health_mode(g) != "burnIn" or g.facts is None or level not in DCGM_LEVELS:
            continue
        gate = pull + c.burn_in_minutes(g)
        version = c.cluster.kubernetes_version
        if (
            c.autoscaled(g)
            and g.min_nodes < g.node_count
            and not startup_flag(version)
            and gate > AUTOSCALER_NODE_STARTUP_MINUTES
        ):
            r.problem(
                f"{k}.dcgmLevel",
                level,
                f"the burn-in takes ~{gate:.0f} min on {g.instance_type} (the image pull included), past the "
                f"{AUTOSCALER_NODE_STARTUP_MINUTES} min the cluster autoscaler for Kubernetes {version} waits for a "
                "node it added to become ready before it adds another for the same pods (from 1.35 the stack "
                "lengthens that wait)",
                "a lower level, cluster.kubernetesVersion 1.35 or later, or minNodes equal to nodeCount "
                "(the nodes are kept and burnt in once)",
            )
            continue
        # Kueue's clock for a job whose nodes the autoscaler brings also covers their joining
        # (components/queueing.py pods_ready_timeout).
        q = c.queueing
        joins = q.max_node_provision_minutes if c.autoscaled(g) else 0
        if gate + 1 > q.pods_ready_timeout_minutes + joins:
            r.problem(
                f"{PROJECT}:queueing.podsReadyTimeoutMinutes",
                q.pods_ready_timeout_minutes,
                f"with {joins} min for the nodes to join, shorter than the ~{gate:.0f} min burn-in of a new "
                f"{g.instance_type} node of group {g.name} (the image pull included) plus a minute to start: "
                "Kueue would evict its jobs while their nodes are still proving themselves",
                f"{math.ceil(gate + 1 - joins)} or more, or a lower {k}.dcgmLevel",
            )


def _check_shared_storage(c: StackConfig, r: Reader) -> None:
    """FSx and Mountpoint live in the stack's VPC and cluster: not on a cluster it did not create."""
    fsx, k = c.storage.fsx, f"{PROJECT}:storage"
    if c.existing_cluster.named and (fsx.enabled or c.storage.datasets_mount):
        key = f"{k}.fsx.enabled" if fsx.enabled else f"{k}.datasetsMount"
        r.problem(
            key,
            True,
            "shared storage is created in the stack's own VPC and cluster",
            "false on an existingCluster",
        )
    names = [g.name for g in c.gpu_node_groups]
    for name in fsx.node_groups:
        if name not in names:
            r.problem(
                f"{k}.fsx.nodeGroups",
                name,
                "no GPU node group has that name",
                ", ".join(names) or "a GPU group",
            )


def _check_builder(c: StackConfig, r: Reader) -> None:
    """What builds the image follows where the stack runs: a kubeconfig stack uses no AWS, kind
    loads only into kind, and with no build every job names its image."""
    e, builder, k = c.existing_cluster, c.image.builder, f"{PROJECT}:image.builder"
    if e.kubeconfig is not None and builder in ("codebuild", "docker"):
        r.problem(
            k, builder, "a kubeconfig stack uses no AWS account (no ECR, no CodeBuild)", "kind, or none"
        )
    if builder == "kind" and (e.kubeconfig is None or e.kind_cluster_name is None):
        r.problem(
            k,
            builder,
            "the image is loaded into a kind cluster",
            "with existingCluster.kubeconfig and existingCluster.kindClusterName; or codebuild, docker",
        )
    if builder == "none":
        for i, j in enumerate(c.jobs):
            if j.image is None:
                r.problem(
                    f"{PROJECT}:jobs[{i}].image",
                    None,
                    "image.builder is none: nothing builds one",
                    "an image reference",
                )


def _aws_tag_text(text: str) -> bool:
    """AWS tags allow letters, digits, spaces and _ . : / = + - @ (no control characters)."""
    return all(ch.isalnum() or ch in _TAG_PUNCTUATION for ch in text)


def _check_tags(tags: dict[str, str], r: Reader) -> None:
    for k, v in tags.items():
        if (
            k.lower().startswith("aws:")
            or not 1 <= len(k) <= 128
            or len(v) > 256
            or not (_aws_tag_text(k) and _aws_tag_text(v))
        ):
            r.problem(
                f"{PROJECT}:tags.{k}",
                v,
                "not a valid AWS tag",
                "keys of 1-128 characters not starting with 'aws:', values up to 256, of letters, digits, "
                "spaces and _ . : / = + - @",
            )


def _check_jobs(c: StackConfig, by_name: dict[str, GpuNodeGroupConfig] | None, r: Reader) -> None:
    """`by_name` is None when the node groups did not parse: nothing to check a job against."""
    p = PROJECT
    for name, n in Counter(j.name for j in c.jobs).items():
        if n > 1:
            r.problem(f"{p}:jobs", name, f"name used by {n} jobs", "unique names")
    queues = _queues(c, by_name)
    _check_waits_in_shared_queues(c, queues, r)
    for i, j in enumerate(c.jobs):
        k = f"{p}:jobs[{i}]"
        check_job_name(j, k, r)
        _check_job_placement(j, by_name, k, r)
        _check_job_fits_queue(j, queues, k, r)
        check_job_run(j, k, r)
        _check_job_operator(j, c.operators, k, r)
        check_job_env_and_wait(j, k, r)
        check_job_secret_env(j, c.secret_job_env, k, r)
        check_job_ray_auth_env(j, k, r)
        _check_job_dataset(j, c, k, r)
        check_job_mount_paths(j, c.datasets, c.storage.datasets_mount, k, r)
        if c.image.builder != "none":
            check_job_command(j, c.image.context, k, r)
        own_role = c.existing_cluster.uses_aws and c.existing_cluster.pod_role_arn is None
        check_job_s3_read(j.s3_read, own_role, k, r)
        _check_job_trainer_args(j, by_name, k, r)
        if c.existing_cluster.pod_role_arn is None:  # a role the user brings may reach any bucket
            check_job_s3_args(j.name, j.args, _reachable_bucket(c), c.datasets, k, r, j.s3_read)
        if j.verl is not None:
            _check_verl(j, by_name, k, r)
            if j.image is None and c.image.builder in ("none", "kind"):
                r.problem(
                    f"{k}.image",
                    "(unset)",
                    f"image.builder {c.image.builder} builds no VERL image (verl and the EFA stack baked in)",
                    "an image with verl, or image.builder codebuild or docker",
                )
        _check_job_memory(j, by_name, k, r)
        group = (by_name or {}).get(j.node_group)
        if group is not None:
            check_job_hyperpod(j, group, k, r)
            if c.existing_cluster.named:  # an `ml.` group on a created cluster is refused on its own
                _check_auto_resume_namespace(j, group, c.training_namespace, r)
        if by_name is not None:
            layers = group_network_layers(c, group) if group is not None else 0
            check_job_topology(j, layers, group.instance_type if group else "", k, r)


def _reachable_bucket(c: StackConfig) -> str | None:
    """The one bucket a job's args may name: a kubeconfig stack's `existingCluster.s3` (its pods
    hold that Secret's keys); the stack's own is named only at `pulumi up`."""
    s3 = c.existing_cluster.s3
    return s3.uri.removeprefix("s3://").partition("/")[0] if s3 is not None else None


def _check_job_memory(j: JobConfig, by_name: dict[str, GpuNodeGroupConfig] | None, k: str, r: Reader) -> None:
    """The default trainer's model trains on the group's GPUs: in bf16 (Ampere or newer), within
    their memory (domain/memory_fit.py models the peak), and each node can pin its ranks'
    checkpoint staging."""
    group = (by_name or {}).get(j.node_group)
    instance = group.facts if group is not None else None
    if instance is None or not j.runs_default_trainer or not instance.has_nvidia_gpus or j.nodes < 1:
        return
    if not has_bf16_tensor_cores(instance.gpu_model or ""):
        r.problem(
            f"{k}.nodeGroup",
            j.node_group,
            f"job '{j.name}' runs the default trainer, which computes in bf16, and the group's "
            f"{instance.gpu_model} ({instance.name}) predates Ampere: it has no bf16 tensor cores",
            "a group of an Ampere or newer GPU (g5, g6, g6e, p4d, p5, p6), or `command:` with a trainer "
            "of your own in fp16 or fp32",
        )
        return
    try:
        run = j.trainer_run()
    except ArgsRefused:  # _check_job_trainer_args says why; nothing to size
        return
    job = JobShape(j.model, run.batch_size, run.seq_len, j.nodes)
    for found in (gpu_fit_problem(job, instance), staging_problem(job, instance)):
        if found:
            why, fits = found
            r.problem(
                f"{k}.model",
                j.model,
                f"job '{j.name}' cannot train on node group '{group.name}': {why}",
                fits,
            )


def _check_auto_resume_namespace(j: JobConfig, group: GpuNodeGroupConfig, namespace: str, r: Reader) -> None:
    """HyperPod's auto-resume watches PyTorchJobs in `kubeflow` and `hyperpod*` namespaces only (AWS,
    "Running jobs using the SageMaker HyperPod CLI": "The job must be running under the kubeflow
    namespace or a namespace prefixed with hyperpod"): elsewhere its annotations do nothing."""
    if not KINDS[j.kind].hyperpod_auto_resume or not group.hyperpod:
        return
    if namespace != "kubeflow" and not namespace.startswith("hyperpod"):
        r.problem(
            f"{PROJECT}:existingCluster.namespace",
            namespace,
            f"job '{j.name}' runs on HyperPod, whose auto-resume watches only kubeflow and hyperpod* namespaces",
            "a namespace starting with hyperpod (hyperpod-training, say)",
        )


def _check_job_trainer_args(
    j: JobConfig, by_name: dict[str, GpuNodeGroupConfig] | None, k: str, r: Reader
) -> None:
    """The default trainer's `args` as its own parser reads them (config/trainer_args.py): a flag it
    does not know, a value it refuses, a flag the stack sets from another setting, or --float8 where
    the group's GPUs have no float8 tensor cores (the trainer's own refusal, at step 0)."""
    if not j.runs_default_trainer:
        return
    try:
        run = j.trainer_run()
    except ArgsRefused as err:
        r.problem(f"{k}.args", err.value, err.reason, err.allowed)
        return
    group = (by_name or {}).get(j.node_group)
    instance = group.facts if group is not None else None
    if not run.float8 or (instance is not None and has_float8_tensor_cores(instance.gpu_model or "")):
        return
    if instance is not None:
        found = f"{instance.gpu_model or 'no GPU'} ({instance.name})"
    elif j.node_group == SYSTEM_GROUP:
        found = "no GPU (the system nodes)"
    else:
        return  # no such group: _check_job_placement says so
    r.problem(
        f"{k}.args",
        "--float8",
        trainer_flags.float8_refusal(found),
        "no --float8, or a group of H100, H200, B200, L4 or L40S GPUs (p5, p5e, p5en, p6, g6, g6e)",
    )


def _check_job_dataset(j: JobConfig, c: StackConfig, k: str, r: Reader) -> None:
    """A named dataset is one the stack prepares, and it gives the job its data flags itself."""
    if j.dataset is None:
        return
    names = [d.name for d in c.datasets]
    if j.dataset not in names:
        r.problem(
            f"{k}.dataset", j.dataset, "no dataset of that name", ", ".join(names) or "declare it in datasets"
        )
    given = [a for a in j.args if a.split("=", 1)[0] in ("--data", "--val-data")]
    if given:
        r.problem(
            f"{k}.args",
            " ".join(given),
            f"dataset {j.dataset} gives the job --data and --val-data",
            "no --data/--val-data with a dataset",
        )


def _check_verl(j: JobConfig, by_name: dict[str, GpuNodeGroupConfig] | None, k: str, r: Reader) -> None:
    """A VERL job runs on Ray, on GPUs that hold its model for training and rollout."""
    v, key = j.verl, f"{k}.verl"
    if j.kind not in RAY_KINDS:
        r.problem(f"{k}.kind", j.kind, "VERL runs on Ray", " or ".join(RAY_KINDS))
    if j.command:
        r.problem(f"{k}.command", list(j.command), "a VERL job runs VERL's trainer", "no command with verl")
    r.ranges(
        key,
        (
            ("epochs", v.epochs, 1, 100),
            ("batchSize", v.batch_size, 1, 65536),
            ("rollouts", v.rollouts, 1, 64),
            ("tensorParallel", v.tensor_parallel, 1, 8),
            ("saveEvery", v.save_every, 1, 100000),
        ),
    )
    if not v.billions():
        r.problem(
            f"{key}.modelBillions",
            None,
            f"the size of {v.model} is not in its name",
            "its parameters in billions",
        )
    group = (by_name or {}).get(j.node_group)
    if by_name is None or (group is None and j.node_group != SYSTEM_GROUP) or v.tensor_parallel < 1:
        return
    it = group.facts if group is not None else None
    if group is not None and it is None:  # a type nobody sells: reported on its own
        return
    gpus = it.gpus if it is not None else 0
    memory_gib = it.gpu_memory_mib / 1024 if it else 0.0  # EC2 gives it per GPU
    why = verl_fits(v.algorithm, v.billions(), v.tensor_parallel, gpus, memory_gib, max(1, j.nodes))
    if why:
        r.problem(
            f"{k}.nodeGroup", j.node_group, f"cannot hold VERL job {j.name}: {why}", "a GPU group that fits"
        )


def _queues(c: StackConfig, by_name: dict[str, GpuNodeGroupConfig] | None) -> dict[str, QueueSpec]:
    """Each group's queue as its described hardware sizes it (the program sizes it from the same
    EC2 answer); empty when the groups did not parse."""
    placement = config_system_placement(c)
    if by_name is None or placement is None:
        return {}
    queues = {SYSTEM_GROUP: QueueSpec(placement, c.system_node_count, provisioned=False)}
    for g in by_name.values():
        if g.facts is not None:
            queues[g.name] = QueueSpec(catalog_placement(g), g.node_count, provisioned=c.autoscaled(g))
    return queues


def _check_job_fits_queue(j: JobConfig, queues: dict[str, QueueSpec], k: str, r: Reader) -> None:
    """Kueue admits a job whole or never: one larger than its queue's quota would wait forever. A
    job has one pod per node, so one with more nodes than its group never fits either, even where
    the quota's room for Ray heads would let Kueue admit it."""
    queue = queues.get(j.node_group)
    if queue is None or j.nodes < 1:
        return
    over = shortfall(job_demand(queue.placement, j.nodes, j.kind), queue.quota())
    if j.nodes > queue.max_nodes and not over:
        over = [f"{j.nodes} nodes"]
    if over:
        what = "the system node group" if queue.group == SYSTEM_GROUP else f"node group '{queue.group}'"
        r.problem(
            f"{k}.nodes",
            j.nodes,
            f"job '{j.name}' can never be admitted by queue '{queue.group}': {what} holds "
            f"{queue.max_nodes} node(s) at most, and the job needs {'; '.join(over)}",
            f"1-{queue.max_nodes}, or a larger node group",
        )


def _check_waits_in_shared_queues(c: StackConfig, queues: dict[str, QueueSpec], r: Reader) -> None:
    """Jobs of one queue that cannot all be admitted at once are admitted one after another, in an
    order Kueue picks: by priority, then creation time, then uid (kueue v0.19.2
    pkg/cache/queue/cluster_queue.go baseCompareFunc, pkg/workload GetQueueOrderTimestamp), and
    `pulumi up` creates them together. A wait for admission or for running could wait for another
    job to finish first, past its timeout; a wait for success counts the others' runs in its
    timeoutMinutes, unless one of them never ends (a RayCluster)."""
    for group, queue in queues.items():
        jobs = [(i, j) for i, j in enumerate(c.jobs) if j.node_group == group and j.nodes >= 1]
        over = shortfall(
            combined([job_demand(queue.placement, j.nodes, j.kind) for _, j in jobs]), queue.quota()
        )
        if len(jobs) < 2 or not over:
            continue
        names = ", ".join(f"'{j.name}' ({j.nodes} node(s))" for _, j in jobs)
        beyond = "; ".join(sorted(over, key=_device_first)[:2])
        for i, j in jobs:
            endless = any(KINDS[o.kind].bare for _, o in jobs if o is not j)
            if j.wait in ("admitted", "running") or (j.wait == "succeeded" and endless):
                r.problem(
                    f"{PROJECT}:jobs[{i}].wait",
                    j.wait,
                    f"jobs {names} cannot all be admitted by queue '{group}' at once ({beyond}), "
                    "so Kueue admits them one after another in an order it picks, and `pulumi up` could "
                    f"wait for another of them to finish first",
                    "none (then `trainstack status` shows the queue), or nodes and node groups that let "
                    f"queue '{group}' hold its jobs together",
                )


def _device_first(shortfall_words: str) -> bool:
    """GPUs and EFA before CPU and memory: what a reader thinks of a node group's size in."""
    return "/" not in shortfall_words.split(" ", 1)[0]


def _check_job_placement(
    j: JobConfig, groups: dict[str, GpuNodeGroupConfig] | None, k: str, r: Reader
) -> None:
    """The group exists and the job has a node; its upper bound is its queue's (below)."""
    if groups is None:
        return
    if j.node_group != SYSTEM_GROUP and j.node_group not in groups:
        r.problem(
            f"{k}.nodeGroup",
            j.node_group,
            "no node group has that name",
            ", ".join([*groups, SYSTEM_GROUP]),
        )
    elif j.nodes < 1:
        r.problem(f"{k}.nodes", j.nodes, "a job needs at least one node", "1 or more")


def _check_job_operator(j: JobConfig, operators: OperatorsConfig, k: str, r: Reader) -> None:
    needs, enabled = operators.runs(j.kind)
    if not enabled:
        r.problem(
            f"{k}.kind",
            j.kind,
            f"operators.{needs} is turned off, and nothing else in the stack runs a {j.kind}",
            f"turn operators.{needs} back on, or remove the job",
        )
