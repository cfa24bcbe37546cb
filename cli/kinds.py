"""What the command reads of each kind of job the stack launches: its API, the phase its status
says, the pods it expects and the failed attempts its operator counts. One entry per kind, keyed by
the stack's list of kinds (`stack_outputs.JobKind`); the rest of the command asks the entry, never
the kind's name. Read from each operator's status types: kubeflow/training-operator v1.9
(`JobCondition` types), KubeRay v1 (`JobStatus`, `JobDeploymentStatus`, `ClusterState`), Kubeflow
Trainer v2.3.0 (`TrainJobStatus`: its conditions and its child Jobs' counts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stack_outputs import JobKind


@dataclass(frozen=True)
class Phase:
    name: str
    failed: bool = False
    done: bool = False


def true_conditions(status: dict) -> list[str]:
    return [c.get("type", "") for c in status.get("conditions") or [] if c.get("status") == "True"]


def _first_true(status: dict, order: tuple[str, ...], failed: str, done: tuple[str, ...]) -> Phase:
    true = true_conditions(status)
    for name in order:
        if name in true:
            return Phase(name, failed=name == failed, done=name in done)
    return Phase("Pending")


def pytorchjob_phase(status: dict) -> Phase:
    order = ("Failed", "Succeeded", "Suspended", "Restarting", "Running", "Created")
    return _first_true(status, order, "Failed", ("Failed", "Succeeded"))


def rayjob_phase(status: dict) -> Phase:
    job = status.get("jobStatus") or "PENDING"
    deployment = status.get("jobDeploymentStatus") or "Initializing"
    failed = job == "FAILED" or deployment in ("Failed", "ValidationFailed")
    return Phase(f"{job} ({deployment})", failed=failed, done=job in ("SUCCEEDED", "FAILED", "STOPPED"))


def raycluster_phase(status: dict) -> Phase:
    state = status.get("state") or ""
    if not state:
        provisioned = "RayClusterProvisioned" in true_conditions(status)
        return Phase("provisioned" if provisioned else "pending")
    return Phase(state, failed=state == "failed")


def trainjob_phase(status: dict) -> Phase:
    """Trainer's conditions (Complete, Failed, Suspended), else its child Jobs' counts: Running
    once every pod of the trainer's Job is ready (`jobsStatus[].ready`)."""
    found = _first_true(status, ("Failed", "Complete", "Suspended"), "Failed", ("Failed", "Complete"))
    if found.name != "Pending":
        return found
    jobs = status.get("jobsStatus") or []
    if jobs and all(j.get("ready", 0) >= 1 for j in jobs):
        return Phase("Running")
    return Phase("Created" if jobs else "Pending")


def ray_cluster_pods(cluster: dict) -> int:
    """The head and each worker group's replicas."""
    return 1 + sum(int(g.get("replicas", 0)) for g in cluster.get("workerGroupSpecs", []))


@dataclass(frozen=True)
class KindReader:
    api: tuple[str, str, str]  # group, version, plural
    phase: Callable[[dict], Phase]  # from the object's status
    expected_pods: Callable[[dict], int]  # from its spec
    counts_attempts: bool = False  # status.failed: the attempts its operator has seen fail


READERS: dict[JobKind, KindReader] = {
    "PyTorchJob": KindReader(
        ("kubeflow.org", "v1", "pytorchjobs"),
        pytorchjob_phase,
        lambda spec: sum(int(r.get("replicas", 1)) for r in spec.get("pytorchReplicaSpecs", {}).values()),
    ),
    "RayJob": KindReader(
        ("ray.io", "v1", "rayjobs"),
        rayjob_phase,
        lambda spec: ray_cluster_pods(spec.get("rayClusterSpec", {})),
        counts_attempts=True,
    ),
    "RayCluster": KindReader(("ray.io", "v1", "rayclusters"), raycluster_phase, ray_cluster_pods),
    "TrainJob": KindReader(
        ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
        trainjob_phase,
        lambda spec: int((spec.get("trainer") or {}).get("numNodes", 1)),
    ),
}
