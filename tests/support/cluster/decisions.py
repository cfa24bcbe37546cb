"""The read a `pulumi up` makes of a cluster it did not create, and its operators' decisions, against a
harness's cluster: `existing_operators` (planes/operators.py) itself, as stacks/attached.py calls it
before registering anything, with the real world's clients (the stack's kubeconfig and context)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from account_checks.operator_decisions import OperatorDecision
from account_checks.world import real_world
from config import parse_config
from conventions import SYSTEM_GROUP
from planes.operators import existing_operators
from support.cluster.harness import Cluster
from support.cluster.stacks import PlannedStack, flat, on_cluster, planned, template_config

CONTEXT = "trainstack-test"  # the harness's kubeconfig's context


def existing_config(cluster: Cluster, jobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The `existing` template aimed at the harness by kubeconfig (`jobs`: in place of its own)."""
    config = template_config("existing")
    if jobs is not None:
        config["trainstack:jobs"] = jobs
    config = on_cluster(config, cluster.kubeconfig, CONTEXT)
    existing = config["trainstack:existingCluster"]
    # By kubeconfig, not by the EKS cluster's name, which the read would ask AWS for.
    existing.pop("eksClusterName")
    # A kubeconfig stack names where its checkpoints go; the template's EKS cluster needs none.
    existing["checkpointHostPath"] = "/var/local/trainstack"
    return config


def decide(config: dict[str, Any]) -> dict[str, OperatorDecision]:
    """Each operator's decision for `config` on the cluster it names, or the program's error."""
    return existing_operators(parse_config("existing", flat(config), frozenset()), None, real_world())


@contextlib.contextmanager
def existing_cluster(directory: Path) -> Iterator[tuple[Cluster, PlannedStack]]:
    """A control plane of its own with the `existing` template's system nodes, and the template
    planned against it; stopped when the block ends."""
    cluster = Cluster(directory)
    try:
        cluster.start()
        stack = planned("existing", existing_config(cluster))
        cluster.add_nodes(next(n for n in stack.nodes if n.group == SYSTEM_GROUP))
        yield cluster, stack
    finally:
        cluster.stop()
