"""What a job's objects say: its phase, its pods (ready, restarts, rank, role), the trainer's metrics
records in its logs, and a GPU node group's nodes against the stack's outputs for it."""

from __future__ import annotations

import json
from dataclasses import dataclass

from cli.kinds import READERS, Phase
from conventions import EFA_RESOURCE, GPU_RESOURCE, NODE_GROUP_LABEL
from stack_outputs import GpuNodeGroup

# A TrainJob's pods: JobSet's replicated Job, and the pod's index in it (its torchrun node rank,
# which Trainer's torch plugin reads from the completion index).
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def job_phase(kind: str, obj: dict | None) -> Phase:
    """One word per job, as `kubectl get` would say it, and whether it failed."""
    if obj is None:
        return Phase("NotFound", failed=True)
    return READERS[kind].phase(obj.get("status") or {})


def retry_state(kind: str, obj: dict | None, bound: str | None) -> str | None:
    """What stops the job when it keeps failing (the stack's sentence), with the operator's count of
    failed attempts (a RayJob's status.failed) once there is one."""
    if bound is None:
        return None
    failed = ((obj or {}).get("status") or {}).get("failed") or 0
    return (
        f"{bound}; {failed} attempt(s) failed so far" if READERS[kind].counts_attempts and failed else bound
    )


def expected_pods(kind: str, obj: dict | None) -> int:
    return 0 if obj is None else READERS[kind].expected_pods(obj.get("spec") or {})


def pod_ready(pod: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


def restarts(pod: dict) -> int:
    return sum(
        int(c.get("restartCount", 0)) for c in pod.get("status", {}).get("containerStatuses", []) or []
    )


def pod_role(pod: dict) -> str:
    """`worker-3`, `head`, `worker-<pod suffix>`: what a log line is prefixed with."""
    labels = pod.get("metadata", {}).get("labels", {})
    if "training.kubeflow.org/replica-type" in labels:
        kind = labels["training.kubeflow.org/replica-type"].lower()
        return f"{kind}-{labels.get('training.kubeflow.org/replica-index', '?')}"
    if REPLICATED_JOB_LABEL in labels:
        return f"{labels[REPLICATED_JOB_LABEL]}-{_completion_index(pod) or '?'}"
    if "ray.io/node-type" in labels:
        node_type = labels["ray.io/node-type"]
        return "head" if node_type == "head" else f"worker-{pod['metadata']['name'].rsplit('-', 1)[-1]}"
    return pod.get("metadata", {}).get("name", "?")


def _completion_index(pod: dict) -> str | None:
    meta = pod.get("metadata", {})
    return (meta.get("labels") or {}).get(COMPLETION_INDEX) or (meta.get("annotations") or {}).get(
        COMPLETION_INDEX
    )


def pod_rank(pod: dict) -> int | None:
    """The node rank of a PyTorchJob worker or a TrainJob pod (torchrun's ranks on it follow)."""
    index = pod.get("metadata", {}).get("labels", {}).get("training.kubeflow.org/replica-index")
    if index is None and REPLICATED_JOB_LABEL in pod.get("metadata", {}).get("labels", {}):
        index = _completion_index(pod)
    return int(index) if index is not None and str(index).isdigit() else None


def parse_metrics(text: str) -> list[dict]:
    """The trainer's `metrics {json}` records with a step and a loss; malformed lines are skipped."""
    found = []
    for line in text.splitlines():
        _, sep, payload = line.partition("metrics ")
        if not sep:
            continue
        try:
            record = json.loads(payload)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int) and "loss" in record:
            found.append(record)
    return found


def node_ready(node: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


def allocatable(node: dict, resource: str) -> int:
    value = node.get("status", {}).get("allocatable", {}).get(resource, "0")
    try:
        return int(value)
    except ValueError:
        return 0


@dataclass
class GroupStatus:
    """A GPU group now: its nodes (the autoscaler adds them per job, up to `maximum`), how many are
    Ready, and the devices each Ready node advertises."""

    name: str
    nodes: int
    ready: int
    minimum: int
    maximum: int
    gpus: list[int]
    efa: list[int]
    gpus_expected: int
    efa_expected: int

    @property
    def failed(self) -> bool:
        return (
            self.ready < self.minimum
            or any(g < self.gpus_expected for g in self.gpus)
            or any(e < self.efa_expected for e in self.efa)
        )


def group_status(name: str, facts: GpuNodeGroup, nodes: list[dict]) -> GroupStatus:
    """`facts`: the stack's outputs for the group. Its nodes carry the stack's group label, or (on a
    cluster the stack did not create) the labels its nodeSelector names."""
    selector = facts.get("nodeSelector") or {NODE_GROUP_LABEL: name}
    mine = [n for n in nodes if selector.items() <= n.get("metadata", {}).get("labels", {}).items()]
    ready = [n for n in mine if node_ready(n)]  # a joining node has no devices yet
    maximum = int(facts.get("nodes", 0))
    return GroupStatus(
        name,
        len(mine),
        len(ready),
        int(facts.get("minNodes", maximum)),
        maximum,
        [allocatable(n, GPU_RESOURCE) for n in ready],
        [allocatable(n, EFA_RESOURCE) for n in ready],
        int(facts.get("gpusPerNode", 0)),
        int(facts.get("efaInterfacesPerNode", 0)),
    )
