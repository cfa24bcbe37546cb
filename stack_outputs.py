"""The stack's outputs: what the Pulumi program exports and `trainstack` and the offline plan read back.

The program (planes/) writes these keys, `pulumi stack output --json --show-secrets` prints them,
and the command (cli/) and the offline plan (offline/plan.py) read them. All of them name their
keys through these types (it is packaged with the command, see pyproject.toml, as conventions.py
is), so a key cannot be spelt two ways. The key names are the JSON's: changing one changes every
stack's outputs.

The types describe the values as read back (JSON); the program writes some of them as Pulumi
outputs that resolve to these. `total=False` and `NotRequired` mark the keys a stack may leave out.
"""

# No `from __future__ import annotations`: TypedDict then sees Required/NotRequired at runtime.

from typing import Any, Literal, NotRequired, Required, TypedDict

JobKind = Literal["PyTorchJob", "RayJob", "RayCluster", "TrainJob"]


class GpuNodeGroup(TypedDict):
    """`gpuNodeGroups[<group>]`: one GPU node group as the stack made (or found) it."""

    # The stack's node group; on an existing cluster, instead, the labels its nodes are found by.
    nodeGroupName: NotRequired[str]
    nodeSelector: NotRequired[dict[str, str]]
    instanceType: str
    nodes: int  # the group's maximum (its configured node count)
    minNodes: int  # `nodes` unless the cluster autoscaler scales the group
    autoscaled: bool
    gpusPerNode: int
    efaInterfacesPerNode: int


class JobSummary(TypedDict):
    """`jobs[<job>]`: one job the stack launches (components/jobs/training_job.py, `TrainingJob.summary`)."""

    kind: JobKind
    nodeGroup: str
    nodes: int
    gpus: int  # nodes x the group's GPUs per node
    hourlyUsd: float | None  # while it runs: nodes x the instance's on-demand price; None: unknown
    queue: str  # its Kueue LocalQueue
    retries: NotRequired[str]  # what stops it when it keeps failing (a sentence; older stacks lack it)
    # kubectl commands to follow it
    watch: str
    logs: str
    dashboard: NotRequired[str]  # RayCluster only: port-forward to its head's dashboard
    experiment: NotRequired[str]  # with tracking: the MLflow experiment its runs land in
    # The plan's modeled tokens/s on 1, 2, 4, ... nodes of its group (default trainer on GPUs only),
    # which `trainstack estimate` scales a measured throughput by.
    modeledTokensPerS: NotRequired[dict[str, float]]


class Operators(TypedDict, total=False):
    """`operators`: each Helm release installed, as "<namespace>/<release>"; the training
    operator's kustomize URL (None when it is off)."""

    nvidiaDevicePlugin: str
    efaDevicePlugin: str
    kuberay: str
    trainer: str
    kueue: str
    clusterAutoscaler: str
    trainingOperator: Required[str | None]


class StackOutputs(TypedDict, total=False):
    """The whole outputs object (`pulumi stack output --json --show-secrets`). Every key is
    optional to a reader: an outputs file may come from an older stack, or be `{}` (with
    --kubeconfig on any cluster)."""

    # Always written.
    clusterName: str
    trainingNamespace: str
    gpuNodeGroups: dict[str, GpuNodeGroup]
    operators: Operators
    jobs: dict[str, JobSummary]
    gpusTotal: int  # GPUs at every GPU node group's maximum size
    driverNeeded: int  # the least NVIDIA driver major the training image needs (absent: unknown)
    # How to reach the cluster: a kubeconfig (a secret; YAML or JSON text, or the object), or
    # (a cluster of the user's, such as kind) the user's own kubeconfig file and its context.
    kubeconfig: str | dict[str, Any]
    kubeconfigFile: str
    kubeContext: str | None
    # AWS stacks.
    trainingRoleArn: str
    bucketName: str
    repositoryUrl: str
    imageUri: str
    # Tracking (MLflow): trackingPortForward only for a server in the cluster (no public endpoint).
    trackingUri: str
    trackingExperiment: str
    trackingPortForward: str
    # GitHub CI access (ci.github): the values for the repository's variables.
    ciOidcProviderArn: str
    ciPreviewRoleArn: str
    ciDeployRoleArn: str
    ciRunnerProject: str  # ci.runner codebuild: vars.CI_RUNNER_PROJECT_<STACK>
