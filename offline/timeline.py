"""How long a first `pulumi up` takes: the longest dependency chain through the plan; and how long
a job on an idle stack takes from admission to its first step.

Each resource is weighted by the typical provisioning time in ../shared/reference/aws-gpu-facts.md;
Pulumi creates everything whose dependencies are done in parallel, so the longest weighted chain
is the wall-clock estimate, and it names what serialises the run. A GPU group the autoscaler sizes
starts empty: each job on it waits for its nodes to join and pull the image.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from conventions import NODE_GROUP_LABEL, TRAINING_NAMESPACE
from domain.catalog import image_pull_minutes
from offline.engine import Registration

# Typical minutes (midpoints of the reference's ranges); anything not listed takes seconds.
TYPICAL_MINUTES = {
    "eks:index:Cluster": 12.0,  # EKS control plane 9-15 min
    "aws:ec2/natGateway:NatGateway": 2.0,
    "aws:ec2/vpc:Vpc": 0.5,
    "aws:eks/addon:Addon": 0.5,
    "kubernetes:helm.sh/v3:Release": 1.25,  # a small operator: 0.5-2 min
    "kubernetes:kustomize/v2:Directory": 1.25,  # an operator's manifests, awaited like a release
    "pulumi-python:dynamic:Resource": 7.5,  # CodeBuild of a CUDA PyTorch image: 5-10 min uncached
    "docker:index/image:Image": 7.5,
    "aws:fsx/lustreFileSystem:LustreFileSystem": 10.0,  # up to 10 min, beside the cluster
    "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation": 7.0,  # up to 7 min
    "aws:rds/instance:Instance": 10.0,  # MLflow's database, beside the cluster (an estimate: 5-15 min)
}
CPU_NODE_GROUP_MINUTES = 2.25  # 1.5-3 min
GPU_NODE_GROUP_MINUTES = 5.0  # ~5 min to join
GPU_NODE_JOIN_MINUTES = 5.0  # a node the autoscaler adds: launch and join, as a group's first nodes
POD_START_MINUTES = 0.5  # image already on the node
NODE_CHECK_MINUTES = 0.5  # a fresh node: scheduling, and the job's check of its nodes before step 0
OTHER_MINUTES = 0.05
TRAINING_KINDS = (
    "kubernetes:kubeflow.org/v1:PyTorchJob",
    "kubernetes:ray.io/v1:RayJob",
    "kubernetes:ray.io/v1:RayCluster",
)
NODE_GROUP = "eks:index:ManagedNodeGroup"


def _group(reg: Registration) -> str | None:
    labels = (reg.inputs.get("metadata") or {}).get("labels") or {}
    return labels.get(NODE_GROUP_LABEL)


def _starts_empty(reg: Registration) -> bool:
    return reg.type == NODE_GROUP and (reg.inputs.get("scalingConfig") or {}).get("desiredSize") == 0


@dataclass(frozen=True)
class JobStart:
    """Minutes from a job's admission to its first step."""

    provision: float  # nodes the autoscaler adds
    pull: float  # the image, on fresh nodes
    start: float  # pods start, the job checks its nodes

    @property
    def total(self) -> float:
        return self.provision + self.pull + self.start

    def describe(self) -> str:
        parts = [f"nodes ~{self.provision:g}"] if self.provision else []
        parts += [f"image pull ~{self.pull:.1f}"] if self.pull else []
        return ", ".join([*parts, f"pod start ~{self.start:g}"])


def job_starts(resources: list[Registration], image_gb: float) -> dict[str, JobStart]:
    """Each workload's own minutes, by URN: on a group that starts empty every job waits for its
    nodes and pulls the image; on a group with nodes, the first job pulls and later ones reuse it."""
    empty = {(r.inputs.get("labels") or {}).get(NODE_GROUP_LABEL) for r in resources if _starts_empty(r)}
    pull = image_pull_minutes(image_gb)
    starts, pulled = {}, set()
    for reg in resources:
        if reg.type not in TRAINING_KINDS:
            continue
        group = _group(reg)
        if group in empty:
            starts[reg.urn] = JobStart(GPU_NODE_JOIN_MINUTES, pull, POD_START_MINUTES + NODE_CHECK_MINUTES)
        else:
            starts[reg.urn] = JobStart(0.0, 0.0 if group in pulled else pull, POD_START_MINUTES)
        pulled.add(group)
    return starts


def job_start_minutes(
    resources: list[Registration], image_gb: float, namespace: str = TRAINING_NAMESPACE
) -> dict[str, JobStart]:
    """The same, by job name (its Kubernetes name in the stack's training namespace)."""
    by_urn = {r.urn: r for r in resources}
    return {
        by_urn[urn].inputs["metadata"]["name"]: start
        for urn, start in job_starts(resources, image_gb).items()
        if by_urn[urn].inputs["metadata"].get("namespace") == namespace
    }


def typical_minutes(reg: Registration) -> float:
    if reg.type == NODE_GROUP:
        gpu = "NVIDIA" in str(reg.inputs.get("amiType", ""))
        # An empty group is created in a CPU group's time; its nodes come per job.
        return GPU_NODE_GROUP_MINUTES if gpu and not _starts_empty(reg) else CPU_NODE_GROUP_MINUTES
    return TYPICAL_MINUTES.get(reg.type, OTHER_MINUTES)


@dataclass(frozen=True)
class Step:
    name: str
    type: str
    minutes: float  # this step's own time
    done_at: float  # minutes after `pulumi up` starts


def critical_path(
    resources: list[Registration], until: set[str] | None = None, image_gb: float = 0.0
) -> list[Step]:
    """The longest chain, first step first, ending at the latest of `until` (default: any)."""
    by_urn = {r.urn: r for r in resources}
    workloads = {urn: start.total for urn, start in job_starts(resources, image_gb).items()}

    def own_minutes(r: Registration) -> float:
        if is_local_component(r) or inside_remote_component(r):
            return 0.0
        return workloads.get(r.urn, typical_minutes(r))

    children: dict[str, list[str]] = {}
    for r in resources:
        if r.parent:
            children.setdefault(r.parent, []).append(r.urn)

    def is_local_component(r: Registration) -> bool:
        return not r.custom and r.type.startswith("trainstack:")

    def inside_remote_component(r: Registration) -> bool:
        parent = by_urn.get(r.parent or "")
        return parent is not None and not parent.custom and not is_local_component(parent)

    @cache
    def finish(urn: str) -> tuple[float, str | None]:
        """(minutes until `urn` is ready, the URN that was waited for last)."""
        r = by_urn.get(urn)
        if r is None:
            return 0.0, None
        if is_local_component(r):
            # Waiting on a component means waiting on everything in it.
            waits = [(finish(c)[0], c) for c in children.get(urn, [])]
        else:
            waits = [(finish(d)[0], d) for d in r.dependencies if d in by_urn and d != urn]
        start, last = max(waits, default=(0.0, None))
        return start + own_minutes(r), last

    targets = [r.urn for r in resources if until is None or r.urn in until]
    if not targets:
        return []
    end = max(targets, key=lambda u: finish(u)[0])
    chain: list[Step] = []
    urn: str | None = end
    while urn is not None:
        r = by_urn[urn]
        done, urn = finish(urn)
        if not is_local_component(r):
            chain.append(Step(r.name, r.type, own_minutes(r), done))
    return list(reversed(chain))


def until_training(resources: list[Registration]) -> set[str] | None:
    """The training workloads, when the stack launches any: the estimate ends where training starts."""
    jobs = {r.urn for r in resources if r.type in TRAINING_KINDS}
    return jobs or None


def describe(chain: list[Step]) -> list[str]:
    if not chain:
        return []
    total = chain[-1].done_at
    what = (
        "until training starts" if chain[-1].type in TRAINING_KINDS else "along its longest dependency chain"
    )
    lines = [f"Estimated first `pulumi up`: ~{total:.0f} min {what}:"]
    lines += [
        f"  {s.done_at:6.1f} min  {s.name} ({s.type}, ~{s.minutes:.3g} min)"
        for s in chain
        if s.minutes >= 0.25  # the steps that take time; seconds-long ones are left out
    ]
    return lines
