"""What Kueue counts: each queue's nominal quota (its group at its largest size, as the jobs' pods
request it, plus room for Ray heads on the system flavor) and each job's demand by flavor. The config
checks refuse a job whose demand exceeds its queue's quota (Kueue would never admit it), and the
queueing plane writes the same quota into the ClusterQueues."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from conventions import EFA_RESOURCE, GPU_RESOURCE, SYSTEM_GROUP, cluster_queue_name
from domain.job_kinds import KINDS
from domain.placement import Placement

SYSTEM_FLAVOR = cluster_queue_name(SYSTEM_GROUP)

Amounts = dict[str, int]  # cpu in millicores, memory in GiB, devices in units


def _add(a: Mapping[str, int], b: Mapping[str, int]) -> Amounts:
    return {k: a.get(k, 0) + b.get(k, 0) for k in dict.fromkeys([*a, *b])}


def _times(a: Mapping[str, int], n: int) -> Amounts:
    return {k: v * n for k, v in a.items()}


def per_node(p: Placement) -> Amounts:
    """What one of a job's pods on `p` requests: the job pods take whole nodes."""
    amounts = {"cpu": int(p.cpu_request) * 1000, "memory": int(p.memory_request.removesuffix("Gi"))}
    if p.gpus:
        amounts[GPU_RESOURCE] = p.gpus
    if p.efa:
        amounts[EFA_RESOURCE] = p.efa
    return amounts


def _amounts(requests: Mapping[str, str]) -> Amounts:
    return {
        "cpu": int(requests["cpu"].removesuffix("m")),
        "memory": int(requests["memory"].removesuffix("Gi")),
    }


def on_system(kind: str) -> Amounts:
    """What a job of `kind` needs on the system flavor besides its workers (a Ray head, a RayJob's
    submitter), in the units above."""
    found: Amounts = {}
    for requests in KINDS[kind].system_pods:
        found = _add(found, _amounts(requests))
    return found


# The most any kind needs on the system flavor (a RayJob's head and submitter).
MOST_ON_SYSTEM = max((on_system(k) for k in KINDS), key=lambda a: (a.get("cpu", 0), a.get("memory", 0)))


@dataclass(frozen=True)
class QueueSpec:
    """One node group's queue: its flavor's node facts and how many nodes it can hold."""

    placement: Placement
    max_nodes: int
    provisioned: bool  # the autoscaler brings its nodes per job: admission waits for them
    network_layers: int = 0  # its nodes' EC2 network layers as EKS labels them (0: no Kueue Topology)

    @property
    def group(self) -> str:
        return self.placement.group

    @property
    def flavor(self) -> str:
        return cluster_queue_name(self.group)

    @property
    def resources(self) -> list[str]:
        return list(per_node(self.placement))

    def quota(self) -> dict[str, Amounts]:
        """Nominal quota per flavor: the group at its largest size, as its jobs' pods request it. A GPU
        queue adds a RayJob's head and submitter per node on the system flavor (no more jobs than
        nodes run at once); the system queue, where CPU jobs take half a node each, one beside them."""
        nodes = _times(per_node(self.placement), self.max_nodes)
        ray = MOST_ON_SYSTEM
        if self.group == SYSTEM_GROUP:
            return {self.flavor: _add(nodes, ray)}
        heads = _times(ray, self.max_nodes)
        # The system flavor first: a Ray head fits it; a GPU pod does not (no GPU quota there) and
        # goes on to the group's flavor, on clusters whose node labels share no key as well.
        return {SYSTEM_FLAVOR: {r: heads.get(r, 0) for r in nodes}, self.flavor: nodes}


def job_demand(p: Placement, nodes: int, kind: str) -> dict[str, Amounts]:
    """What Kueue counts for a job, by flavor: its workers, and on the system flavor its kind's pods
    beside them (domain.job_kinds)."""
    demand = {cluster_queue_name(p.group): _times(per_node(p), nodes)}
    if KINDS[kind].system_pods:
        demand[SYSTEM_FLAVOR] = _add(demand.get(SYSTEM_FLAVOR, {}), on_system(kind))
    return demand


def combined(demands: list[dict[str, Amounts]]) -> dict[str, Amounts]:
    """What several jobs' demands (job_demand) need together, by flavor."""
    total: dict[str, Amounts] = {}
    for demand in demands:
        for flavor, amounts in demand.items():
            total[flavor] = _add(total.get(flavor, {}), amounts)
    return total


def shortfall(demand: dict[str, Amounts], quota: dict[str, Amounts]) -> list[str]:
    """What a demand needs beyond a queue's quota, in words; empty when it fits."""
    over = []
    for flavor, amounts in demand.items():
        for resource, amount in amounts.items():
            limit = quota.get(flavor, {}).get(resource, 0)
            if amount > limit:
                over.append(
                    f"{resource} {quantity(resource, amount)} > {quantity(resource, limit)} on flavor {flavor}"
                )
    return over


def quantity(resource: str, amount: int) -> str:
    if resource == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource == "memory":
        return f"{amount}Gi"
    return str(amount)
