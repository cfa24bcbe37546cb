"""Queueing plane config: how Kueue admits jobs and how the cluster autoscaler sizes GPU groups.

Which Kueue and autoscaler charts are installed is under `operators` (`kueue`, `clusterAutoscaler`);
these are the timings both run by."""

from __future__ import annotations

from dataclasses import dataclass

from config.names import PROJECT
from config.schema import Reader, setting


@dataclass(frozen=True)
class QueueingConfig:
    idle_node_minutes: int = setting(
        "idleNodeMinutes",
        "Minutes a GPU node may sit without a job pod before the autoscaler removes it (1-1440).",
        10,
    )
    pods_ready_timeout_minutes: int = setting(
        "podsReadyTimeoutMinutes",
        "Minutes an admitted job's pods may take to be ready once their nodes exist (image pull included) "
        "before Kueue evicts and requeues it, giving its quota back (1-240). Kueue's timeout adds "
        "maxNodeProvisionMinutes where the autoscaler brings the nodes: AWS admits before they join.",
        20,
    )
    max_node_provision_minutes: int = setting(
        "maxNodeProvisionMinutes",
        "Minutes the autoscaler waits for a new node before it gives up on it and the ProvisioningRequest "
        "fails (5-120); a p5 can take 15.",
        30,
    )


def check_queueing(q: QueueingConfig, r: Reader) -> None:
    r.ranges(
        f"{PROJECT}:queueing",
        (
            ("idleNodeMinutes", q.idle_node_minutes, 1, 1440),
            ("podsReadyTimeoutMinutes", q.pods_ready_timeout_minutes, 1, 240),
            ("maxNodeProvisionMinutes", q.max_node_provision_minutes, 5, 120),
        ),
    )
