"""What `doctor` looks at (a `ClusterView`, fetched once) and what it says of each rule (a `Finding`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from stack_outputs import GpuNodeGroup


@dataclass
class Finding:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def as_json(self) -> dict:
        return asdict(self)


@dataclass
class ClusterView:
    """What `doctor` looks at, fetched once."""

    nodes: list[dict]
    daemonsets: list[dict]
    deployments: list[dict]
    crds: list[str]
    webhooks: list[str]
    pods: list[dict]
    logs: dict[str, str] = field(default_factory=dict)  # pod name -> recent log
    previous_logs: dict[str, str] = field(default_factory=dict)  # pod name -> last crashed run
    gpu_groups: dict[str, GpuNodeGroup] = field(default_factory=dict)  # stack outputs: gpuNodeGroups
    jobs: dict[str, str] = field(default_factory=dict)  # the stack's jobs that exist: name -> kind
    workloads: list[dict] = field(default_factory=list)  # Kueue's, one per queued job
    provisioning_requests: list[dict] = field(default_factory=list)
    node_events: list[dict] = field(default_factory=list)
    driver_needed: int | None = None  # stack outputs: the least NVIDIA driver major the image needs
