"""What one node of a group offers a job's pods: its facts, the requests a whole-node pod makes, and
how the pod finds the node. Config checks, the queue quotas and the job manifests all read this one
definition, so a job that passes the checks asks for exactly what its queue holds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conventions import (
    EFA_RESOURCE,
    GPU_NODE_LABEL,
    GPU_RESOURCE,
    GPU_TOLERATION,
    NODE_GROUP_LABEL,
    SYSTEM_GROUP,
    SYSTEM_NODE_LABEL,
)

RAY_HEAD = {"cpu": "500m", "memory": "3Gi"}  # fits the system nodes, next to the operators
# A RayJob's submitter (the Kubernetes Job that runs `ray job submit`): Kueue counts it as a third
# pod set. Named in the RayJob, in whole GiB, rather than Kueue's and KubeRay's default (500m, 200Mi).
RAY_SUBMITTER = {"cpu": "500m", "memory": "1Gi"}
# What a RayJob's entrypoint (the job's own driver) asks Ray for: one CPU, which only workers have
# (the head starts with num-cpus 0), so the job's code never runs on the system nodes.
RAY_DRIVER_CPUS = 1


@dataclass(frozen=True)
class Placement:
    """Where a job's pods run and what one node of that group offers them."""

    group: str
    instance_type: str
    gpus: int
    efa: int
    vcpus: int
    memory_gib: int
    hourly_usd: float | None  # None: price unknown
    node_selector: dict[str, str]  # also its Kueue flavor's node labels
    hyperpod: bool = (
        False  # a HyperPod instance group's node: its overlay applies (components/jobs/hyperpod.py)
    )

    @property
    def cpu_request(self) -> str:
        # kubelet, the CNI, kube-proxy, device plugins and the pod identity agent keep ~5% (>= 1).
        return str(max(1, self.vcpus - max(1, -(-self.vcpus * 5 // 100))))

    @property
    def memory_request(self) -> str:
        # EKS reserves ~1-2 GiB for the kubelet and eviction on large nodes, more in proportion.
        return f"{max(1, self.memory_gib * 90 // 100 - 1)}Gi"

    @property
    def shm_size(self) -> str:
        # NCCL and DataLoader workers use /dev/shm; memory-backed, counted in the pod's memory.
        return f"{max(1, self.memory_gib // 8)}Gi"

    def resources(self) -> dict[str, Any]:
        requests: dict[str, str] = {"cpu": self.cpu_request, "memory": self.memory_request}
        devices = {}
        if self.gpus:
            devices[GPU_RESOURCE] = str(self.gpus)
        if self.efa:
            # Without it NCCL silently falls back to TCP sockets.
            devices[EFA_RESOURCE] = str(self.efa)
        return {"requests": {**requests, **devices}, "limits": devices} if devices else {"requests": requests}

    def pod_placement(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"nodeSelector": dict(self.node_selector)}
        if self.gpus:
            spec["tolerations"] = [GPU_TOLERATION]
        return spec


def system_placement(
    instance_type: str,
    vcpus: int,
    memory_gib: int,
    hourly_usd: float | None,
    selector: dict[str, str] | None = None,
) -> Placement:
    """A CPU job shares the system nodes with the operators, CoreDNS and Ray heads: it asks for
    half a node, so it schedules beside them. `selector`: the nodes of a cluster the stack did not
    create (default: the system node group's label)."""
    half_cpus, half_memory = max(1, vcpus // 2), max(1, memory_gib // 2)
    return gpu_placement(
        SYSTEM_GROUP, instance_type, 0, 0, half_cpus, half_memory, hourly_usd, selector or SYSTEM_NODE_LABEL
    )


def gpu_placement(
    group: str,
    instance_type: str,
    gpus: int,
    efa: int,
    vcpus: int,
    memory_gib: int,
    hourly_usd: float | None,
    selector: dict[str, str] | None = None,
    hyperpod: bool = False,
) -> Placement:
    """A GPU group's node; `selector`: how to find it on a cluster the stack did not create
    (default: the labels the stack gives the groups it creates)."""
    return Placement(
        group,
        instance_type,
        gpus,
        efa,
        vcpus,
        memory_gib,
        hourly_usd,
        dict(selector or {**GPU_NODE_LABEL, NODE_GROUP_LABEL: group}),
        hyperpod,
    )
