"""A GPU group's health gate (`gpuNodeGroups[].health`): whether its new nodes are burnt in before
they train, how deep DCGM looks, and how far under its group's own figures a node may fall."""

from __future__ import annotations

from dataclasses import dataclass

from config.schema import setting
from domain.node_health import DEFAULT_FLOOR_FRACTION, HealthMode


@dataclass(frozen=True)
class GroupHealthConfig:
    mode: HealthMode | None = setting(
        "mode",
        "burnIn: a new node trains only after it passed the burn-in (GPU inventory and Xids, EFA, NVLink, "
        "DCGM diagnostics, an all-reduce against the group's floor); a failed one is tainted and replaced. "
        "passive: no burn-in; a node whose GPUs fail while it trains is tainted at once. off: neither. "
        "Default: burnIn for p4d, p4de, p5, p5e, p5en and p6, passive for the others, off on an "
        "existingCluster (HyperPod gates its nodes with its own deep health checks).",
        None,
    )
    dcgm_level: int | None = setting(
        "dcgmLevel",
        "DCGM diagnostics level of the burn-in (1-4): 2 takes about 2.5-10.5 minutes on a P instance; "
        "3 and 4 run far longer. Default: 2, or 1 where 2 would outlast the 15 minutes the cluster "
        "autoscaler of Kubernetes 1.33 and 1.34 waits for a node it added (from 1.35 the stack lengthens it).",
        None,
    )
    floor_fraction: float = setting(
        "floorFraction",
        "A node fails the all-reduce step below this fraction (0.5-0.95) of the median of its group's first "
        "healthy nodes, or of the published figure for its type until three passed.",
        DEFAULT_FLOOR_FRACTION,
    )
