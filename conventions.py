"""Names the stack writes onto the cluster and the `trainstack` command reads back.

The Pulumi program labels, taints and places what it creates with these; the `trainstack` command
finds jobs, pods and node groups by them. Both import this one module (it is packaged with the
command, see pyproject.toml), so the two can never disagree.
"""

from __future__ import annotations

# Where jobs run and as whom.
TRAINING_NAMESPACE = "training"
# The bucket's datasets/ prefix, mounted read-only in every job with storage.datasetsMount.
DATASETS_MOUNT = "/datasets"
TRACKING_NAMESPACE = "mlflow"  # the MLflow server the stack runs (tracking.mode: server)

# Every object the stack creates in the cluster.
PART_OF = {"app.kubernetes.io/part-of": "trainstack"}
# On a cluster the stack did not create, what a stack installed there (the Secret of each of its Helm
# releases, the training operator's Deployment) carries this label with the stack's name: a later run
# of that stack knows its own, whatever its namespace setting has become.
STACK_LABEL = "trainstack.dev/stack"

# Objects with a fixed name in the training namespace. On a cluster the stack did not create, that
# namespace may be the owner's (HyperPod's `kubeflow`, a team's own), holding objects of the same names
# (`default-deny-ingress` is the Kubernetes docs' own example): there the stack's carry its name
# (`in_shared_namespace`), so it never creates over, co-owns or deletes the owner's.
HF_TOKEN_SECRET = "hf-token"
DEFAULT_DENY_POLICY = "default-deny-ingress"


def in_shared_namespace(stack: str, name: str) -> str:
    """The name of the stack's object `name` in a namespace it does not own."""
    return f"trainstack-{stack}-{name}"


# Node labels. Every GPU node carries its group's name; job pods select their group by it.
NODE_GROUP_LABEL = "trainstack.dev/node-group"
INSTANCE_TYPE_LABEL = "trainstack.dev/instance-type"
ACCELERATOR_LABEL = "trainstack.dev/accelerator"
# The cluster autoscaler's AWS provider recognises GPU nodes by this label.
AWS_GPU_LABEL = "k8s.amazonaws.com/accelerator"
ROLE_LABEL = "trainstack.dev/role"
SYSTEM_NODE_LABEL = {ROLE_LABEL: "system"}
# GPU nodes carry the role too: a Ray head (role system) can then never be given a GPU group's
# Kueue flavor, whose node labels include role gpu.
GPU_NODE_LABEL = {ROLE_LABEL: "gpu"}
# The system node group's name where a job config names a group.
SYSTEM_GROUP = "system"
EFA_LABEL = "vpc.amazonaws.com/efa.present"
# What the NVIDIA device plugin's chart selects GPU nodes by when node feature discovery is absent.
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"

# EKS's labels of a node's place in the EC2 network (layer 1 the broadest), on the instance types
# EC2 describes it for (domain/topology.py), and the kubelet's own name label.
HOSTNAME_LABEL = "kubernetes.io/hostname"


def network_layer_label(layer: int) -> str:
    return f"topology.k8s.aws/network-node-layer-{layer}"


# Pod labels.
JOB_LABEL = "trainstack.dev/job"
RAY_ROLE_LABEL = "trainstack.dev/ray-role"
# A Ray job's pods by role: the NetworkPolicies open the head's dashboard to the submitter only.
RAY_HEAD_ROLE = "head"
RAY_WORKER_ROLE = "worker"
RAY_SUBMITTER_ROLE = "submitter"
# The Ray head's dashboard and job API (KubeRay's DefaultDashboardPort): `ray job submit`, the
# operator's job status, and the port-forward `trainstack` prints.
RAY_DASHBOARD_PORT = 8265
PREFLIGHT_LABEL = "trainstack.dev/preflight"
# On a job's pods: the preflight Job that checked their node group.
PREFLIGHT_ANNOTATION = "trainstack.dev/preflight"

# Extended resources the device plugins advertise.
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"

# GPU nodes repel everything that does not ask for them (EKS's node group taint spelling).
GPU_TAINT = {"key": GPU_RESOURCE, "value": "true", "effect": "NO_SCHEDULE"}
# How pods (device plugins, jobs) tolerate GPU_TAINT.
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}

# The health gate (components/health_gate.py; its program, workload/trainer/health_gate.py, holds
# the same names, which a test keeps equal). A GPU node of a burnt-in group registers with the
# startup taint: the cluster autoscaler takes a node with a taint of this prefix as still starting
# (cluster-autoscaler FAQ, "startup taints"), so pending jobs still scale the group up, and drops it
# from its node templates. The gate removes it once the node passed, or puts the NoExecute taint in
# its place, valued by the fault's severity. Only the gate's own pods and the device plugins, which
# give it the GPUs and EFA devices, tolerate the startup taint. EKS takes a node group taint's key of
# at most 63 characters (API Taint), the autoscaler's prefix being 47 of them.
AUTOSCALER_STARTUP_TAINT_PREFIX = "startup-taint.cluster-autoscaler.kubernetes.io/"
HEALTH_STARTUP_TAINT_KEY = f"{AUTOSCALER_STARTUP_TAINT_PREFIX}trainstack-gate"
# A failed node's NoExecute taint is one of the autoscaler's status taints: a node that is there but
# takes no pod, and is dropped from the template the autoscaler makes of it (so the group still
# scales up); the gate puts it on the node itself, never through EKS.
AUTOSCALER_STATUS_TAINT_PREFIX = "status-taint.cluster-autoscaler.kubernetes.io/"
HEALTH_STARTUP_TAINT = {"key": HEALTH_STARTUP_TAINT_KEY, "value": "burn-in", "effect": "NO_SCHEDULE"}
HEALTH_STARTUP_TOLERATION = {"key": HEALTH_STARTUP_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
HEALTH_FAILED_TAINT_KEY = f"{AUTOSCALER_STATUS_TAINT_PREFIX}trainstack-unhealthy"
# On every GPU node of the stack's groups: burnIn or passive (its group's health mode); and, once
# judged, passed or failed with the result as JSON.
HEALTH_MODE_LABEL = "trainstack.dev/health-mode"
HEALTH_LABEL = "trainstack.dev/health"
HEALTH_RESULT_ANNOTATION = "trainstack.dev/health-result"

# SageMaker HyperPod (EKS orchestrator; its `ml.` instance types, a group's `hyperpod` and its placement's):
# its health agents label (and, when unhealthy, taint with the same key) its nodes, and its
# job-auto-restart controller reads two PyTorchJob annotations (aws/sagemaker-hyperpod-cli,
# src/sagemaker/hyperpod/cli/constants/command_constants.py). The stack places jobs by them and
# `trainstack doctor` reads them back.
HYPERPOD_HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
HYPERPOD_SCHEDULABLE = "Schedulable"
HYPERPOD_DEEP_HEALTH_LABEL = "sagemaker.amazonaws.com/deep-health-check-status"
HYPERPOD_DEEP_HEALTH_PASSED = "Passed"
HYPERPOD_CLUSTER_LABEL = "sagemaker.amazonaws.com/cluster-name"
HYPERPOD_AUTO_RESUME_ANNOTATION = "sagemaker.amazonaws.com/enable-job-auto-resume"
HYPERPOD_MAX_RETRY_ANNOTATION = "sagemaker.amazonaws.com/job-max-retry-count"
# What a healthy node that passed the deep health checks carries.
HYPERPOD_HEALTHY_LABELS = {
    HYPERPOD_HEALTH_LABEL: HYPERPOD_SCHEDULABLE,
    HYPERPOD_DEEP_HEALTH_LABEL: HYPERPOD_DEEP_HEALTH_PASSED,
}


# Kueue: every job the stack launches names its LocalQueue with this label; one LocalQueue per node
# group (system included), named as the group.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def cluster_queue_name(group: str) -> str:
    """The ClusterQueue and ResourceFlavor of a node group (cluster-scoped, so prefixed)."""
    return f"trainstack-{group}"


# Cluster autoscaler: it discovers Auto Scaling groups that carry both tags (EKS sets the first on
# every managed node group; the stack sets the second only on the groups it lets the autoscaler
# scale), and reads what a node would offer from the node-template tags.
def autoscaler_discovery_tags(cluster_name: str) -> tuple[str, str]:
    return f"k8s.io/cluster-autoscaler/{cluster_name}", f"trainstack.dev/autoscaled/{cluster_name}"


NODE_TEMPLATE_TAG = "k8s.io/cluster-autoscaler/node-template"


def job_service_account(job: str) -> str:
    """A job's own service account in the training namespace, the only one its AWS identity is
    given to (the stack writes it, `trainstack doctor` checks its pods' credentials). Prefixed, so
    no job name ("default") can take an account the namespace already has."""
    return f"job-{job}"


# The NVIDIA driver a node has, as GPU feature discovery labels it (NVIDIA/k8s-device-plugin,
# internal/lm/nvml.go, newVersionLabeler): the current label, then the deprecated one older GFDs
# write. The stack's account checks and `trainstack doctor` both read it (domain/drivers.py).
DRIVER_MAJOR_LABELS = ("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver.major")


def driver_major(labels: dict[str, str]) -> int | None:
    """A node's driver major from its GFD labels; None when it has none."""
    for key in DRIVER_MAJOR_LABELS:
        value = labels.get(key, "")
        if value.isdigit():
            return int(value)
    return None
