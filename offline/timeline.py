"""How long a first `pulumi up` takes: the longest dependency chain through the plan; and how long
a job on an idle stack takes from admission to its first step.

Each resource is weighted by the typical provisioning time in ../shared/reference/aws-gpu-facts.md;
Pulumi creates everything whose dependencies are done in parallel, so the longest weighted chain
is the wall-clock estimate, and it names what serialises the run. A GPU group the autoscaler sizes
starts empty: each job on it waits for its nodes to join and pull its images, each at its own size
(a VERL job pulls VERL's image and, for its data, the training image). A dataset's preparation Job
takes its preparation time (offline/plan.py gives it per Job), and a job that names the dataset
waits for it on the first `pulumi up`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from components.jobs.kinds import KINDS
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
TRAINING_KINDS = tuple(f"kubernetes:{k.api_version}:{k.name}" for k in KINDS.values())
NODE_GROUP = "eks:index:ManagedNodeGroup"
PREPARATION_JOB = "kubernetes:batch/v1:Job"
# An image's compressed GB, by its reference; a float: every image that size.
ImageSizes = Callable[[str], float] | float


def _group(reg: Registration) -> str | None:
    labels = (reg.inputs.get("metadata") or {}).get("labels") or {}
    return labels.get(NODE_GROUP_LABEL)


def _starts_empty(reg: Registration) -> bool:
    return reg.type == NODE_GROUP and (reg.inputs.get("scalingConfig") or {}).get("desiredSize") == 0


@dataclass(frozen=True)
class JobStart:
    """Minutes from a job's admission to its first step, and the preparation of its dataset the
    first `pulumi up` waits for before it submits the job."""

    provision: float  # nodes the autoscaler adds
    pull: float  # its images, on fresh nodes
    start: float  # pods start, the job checks its nodes
    prepare: float = 0.0  # its dataset's preparation (first `pulumi up` only)
    burn_in: float = 0.0  # the health gate's burn-in of fresh nodes (their image pull is `pull`)

    @property
    def after_admission(self) -> float:
        return self.provision + self.pull + self.burn_in + self.start

    @property
    def total(self) -> float:
        return self.prepare + self.after_admission

    def describe(self) -> str:
        parts = [f"dataset preparation ~{self.prepare:.0f}, first up only"] if self.prepare else []
        parts += [f"nodes ~{self.provision:g}"] if self.provision else []
        parts += [f"image pull ~{self.pull:.1f}"] if self.pull else []
        parts += [f"burn-in ~{self.burn_in:.1f}"] if self.burn_in else []
        return ", ".join([*parts, f"pod start ~{self.start:g}"])


def images_of(value: Any) -> list[str]:
    """Every container image a manifest names, in order, once each."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            found += [item] if key == "image" and isinstance(item, str) else images_of(item)
    elif isinstance(value, list):
        for item in value:
            found += images_of(item)
    return list(dict.fromkeys(found))


def _sizer(image_gb: ImageSizes) -> Callable[[str], float]:
    return image_gb if callable(image_gb) else (lambda _image: image_gb)


def job_starts(
    resources: list[Registration],
    image_gb: ImageSizes,
    prepare: Mapping[str, float] | None = None,
    burn_in: Mapping[str, float] | None = None,
) -> dict[str, JobStart]:
    """Each workload's own minutes, by URN: on a group that starts empty every job waits for its
    nodes and pulls its images; on a group with nodes, an image one job pulled is there for the
    next. `prepare`: minutes of the dataset preparation a job (by name) waits for. `burn_in`: the
    health gate's minutes on a fresh node of a group (by name): every job on an empty group waits
    for it, the first on a group with nodes too (its nodes are new on the first `up`)."""
    empty = {(r.inputs.get("labels") or {}).get(NODE_GROUP_LABEL) for r in resources if _starts_empty(r)}
    size, prepare, burn_in = _sizer(image_gb), prepare or {}, burn_in or {}
    starts: dict[str, JobStart] = {}
    pulled: set[tuple[str | None, str]] = set()
    burnt: set[str | None] = set()
    for reg in resources:
        if reg.type not in TRAINING_KINDS:
            continue
        group, images = _group(reg), images_of(reg.inputs.get("spec"))
        data = prepare.get((reg.inputs.get("metadata") or {}).get("name"), 0.0)
        gate = burn_in.get(group or "", 0.0)
        if group in empty:
            pull = sum(image_pull_minutes(size(i)) for i in images)
            starts[reg.urn] = JobStart(
                GPU_NODE_JOIN_MINUTES, pull, POD_START_MINUTES + NODE_CHECK_MINUTES, data, gate
            )
        else:
            pull = sum(image_pull_minutes(size(i)) for i in images if (group, i) not in pulled)
            starts[reg.urn] = JobStart(0.0, pull, POD_START_MINUTES, data, 0.0 if group in burnt else gate)
        pulled |= {(group, i) for i in images}
        burnt.add(group)
    return starts


def job_start_minutes(
    resources: list[Registration],
    image_gb: ImageSizes,
    namespace: str = TRAINING_NAMESPACE,
    prepare: Mapping[str, float] | None = None,
    burn_in: Mapping[str, float] | None = None,
) -> dict[str, JobStart]:
    """The same, by job name (its Kubernetes name in the stack's training namespace)."""
    by_urn = {r.urn: r for r in resources}
    return {
        by_urn[urn].inputs["metadata"]["name"]: start
        for urn, start in job_starts(resources, image_gb, prepare, burn_in).items()
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
    resources: list[Registration],
    until: set[str] | None = None,
    image_gb: ImageSizes = 0.0,
    preparations: Mapping[str, float] | None = None,
    burn_in: Mapping[str, float] | None = None,
) -> list[Step]:
    """The longest chain, first step first, ending at the latest of `until` (default: any).
    `preparations`: a dataset preparation Job's minutes, by its Kubernetes name."""
    by_urn = {r.urn: r for r in resources}
    # A workload's wait for its dataset is the preparation Job's own step, which it depends on.
    workloads = {
        urn: start.after_admission for urn, start in job_starts(resources, image_gb, burn_in=burn_in).items()
    }
    prepared = preparations or {}

    def own_minutes(r: Registration) -> float:
        if is_local_component(r) or inside_remote_component(r):
            return 0.0
        if r.type == PREPARATION_JOB and r.inputs["metadata"]["name"] in prepared:
            return prepared[r.inputs["metadata"]["name"]]
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
