"""Health plane, on a cluster the stack created: the gate that lets a GPU node train only once it
proved itself and takes a node whose hardware fails out at once (components/health_gate.py), and
the fence that lets a job's gang restart past a hung GPU node (components/node_fence.py). Both run
in the stack's image on the system nodes, and may replace instances of the stack's own GPU groups'
Auto Scaling groups only."""

from __future__ import annotations

from dataclasses import dataclass

from components.health_gate import GatedGroup, HealthGate, HealthGateArgs
from components.node_fence import NodeFence, NodeFenceArgs
from config import StackConfig
from conventions import SYSTEM_GROUP
from planes.account import Account
from planes.build import BuildPlane
from planes.compute import ComputePlane


@dataclass(frozen=True)
class HealthPlane:
    fence: NodeFence | None
    gate: HealthGate | None


def gated_groups(cfg: StackConfig) -> list[GatedGroup]:
    return [
        GatedGroup(
            g.name,
            mode,
            g.instance_type,
            g.instance,
            g.efa,
            g.node_count,
            cfg.dcgm_level(g),
            g.health.floor_fraction,
        )
        for g in cfg.gpu_node_groups
        if (mode := cfg.health_mode(g)) != "off"
    ]


def burn_in_by_group(cfg: StackConfig) -> dict[str, float]:
    """Minutes the gate's burn-in holds a fresh node of each burnt-in group (the plan's timeline)."""
    return {g.name: minutes for g in cfg.gpu_node_groups if (minutes := cfg.burn_in_minutes(g))}


def health_plane(cfg: StackConfig, account: Account, build: BuildPlane, compute: ComputePlane) -> HealthPlane:
    own = compute.own
    if own is None or build.image_uri is None:
        return HealthPlane(None, None)
    pods = compute.pod_identity
    system = compute.placements[SYSTEM_GROUP].pod_placement()
    waits_for = [r for r in (compute.system_nodes, pods.namespace) if r is not None]
    fence = None
    if cfg.fenced_after_seconds:
        fence = NodeFence(
            "node-fence",
            NodeFenceArgs(
                provider=compute.provider,
                eks=own.eks,
                namespace=pods.namespace_name,
                image=build.image_uri,
                after_seconds=cfg.fenced_after_seconds,
                pod_placement=system,
                region=cfg.region,
                account_id=account.account_id,
                autoscaling_group_names=[ng.autoscaling_group_name for ng in own.node_groups],
                waits_for=waits_for,
            ),
            account.opts,
        )
    groups = gated_groups(cfg)
    gate = None
    if groups:
        names = {g.name for g in groups}
        gate = HealthGate(
            "health-gate",
            HealthGateArgs(
                provider=compute.provider,
                eks=own.eks,
                namespace=pods.namespace_name,
                image=build.image_uri,
                groups=groups,
                pod_placement=system,
                region=cfg.region,
                account_id=account.account_id,
                autoscaling_group_names=[
                    ng.autoscaling_group_name for ng in own.node_groups if ng.group_name in names
                ],
                waits_for=waits_for,
            ),
            account.opts,
        )
    return HealthPlane(fence, gate)
