"""The claim `existingCluster.checkpointClaim` names, read where the cluster is read, before anything
is registered on it: a pod mounts only a PersistentVolumeClaim of its own namespace (the stack's,
`existingCluster.namespace`), an unbound claim leaves every pod that mounts it Pending, and a claim
that is not ReadWriteMany is mounted by the pods of one node only, so a job across nodes would
wait on it forever (Kubernetes core/v1 types.go: `PersistentVolumeClaimPhase` ClaimPending,
ClaimBound, ClaimLost; `PersistentVolumeAccessMode` ReadWriteOnce, ReadOnlyMany, ReadWriteMany,
ReadWriteOncePod; read with one GET of the claim by name, as the operators are read).
Each failure is one sentence that names the key, what the cluster holds and the fix."""

from __future__ import annotations

from typing import Any

import pulumi

from account_checks.cluster_access import ClusterAddress, ClusterReader, KubeClients
from config import PROJECT, StackConfig
from domain.job_kinds import KINDS

READ_WRITE_MANY = "ReadWriteMany"
BOUND = "Bound"


class CheckpointClaimError(pulumi.RunError):
    def __init__(self, stack: str, problems: list[str]):
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"stack '{stack}': the checkpoint claim cannot serve the jobs; nothing was created:\n{lines}"
        )


def read_claim(reader: ClusterReader, namespace: str, name: str) -> dict[str, Any] | None:
    """The claim as the API answers it, or None where the namespace has none of that name."""
    return reader.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")


def jobs_across_nodes(cfg: StackConfig) -> list[str]:
    """Jobs whose pods mounting the claim run on more than one node: a job of several nodes, and
    any Ray job (its head runs on the system nodes, its workers on the group's)."""
    return [j.name for j in cfg.jobs if KINDS[j.kind].ray or j.nodes > 1]


def claim_problems(cfg: StackConfig, claim: dict[str, Any] | None) -> list[str]:
    name, namespace = cfg.existing_cluster.checkpoint_claim, cfg.training_namespace
    key = f"{PROJECT}:existingCluster.checkpointClaim"
    if name is None:
        return []
    if claim is None:
        return [
            f"{key} = {name}: no PersistentVolumeClaim {name} in namespace {namespace}, the stack's "
            f"(existingCluster.namespace), and a pod mounts only a claim of its own namespace; create it "
            f"there (kubectl -n {namespace} get pvc)"
        ]
    problems = []
    phase = (claim.get("status") or {}).get("phase", "Pending")
    if phase != BOUND:
        problems.append(
            f"{key} = {name}: the claim is {phase}, not {BOUND}, so every pod that mounts it would stay "
            f"Pending; bind it to a volume first (kubectl -n {namespace} describe pvc {name})"
        )
    modes = (claim.get("spec") or {}).get("accessModes") or []
    across = jobs_across_nodes(cfg)
    if READ_WRITE_MANY not in modes and across:
        problems.append(
            f"{key} = {name}: the claim is {', '.join(modes) or 'without access modes'}, mounted on one node "
            f"at a time, and {', '.join(across)} run on more than one; use a {READ_WRITE_MANY} claim (FSx "
            "for Lustre), or one node per job"
        )
    return problems


def check_checkpoint_claim(connect: KubeClients, address: ClusterAddress, cfg: StackConfig) -> None:
    """Stop with every problem of the claim, if the stack names one."""
    name = cfg.existing_cluster.checkpoint_claim
    if name is None:
        return
    with ClusterReader(connect, address, cfg.stack) as reader:
        claim = read_claim(reader, cfg.training_namespace, name)
    problems = claim_problems(cfg, claim)
    if problems:
        raise CheckpointClaimError(cfg.stack, problems)
