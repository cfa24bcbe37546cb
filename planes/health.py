"""Health plane: on a cluster the stack created, the fence that lets a job's gang restart past a hung
GPU node (components/node_fence.py). It needs the stack's image, which runs it, and the GPU groups'
Auto Scaling groups, the only ones it may replace instances of."""

from __future__ import annotations

from components.node_fence import NodeFence, NodeFenceArgs
from config import StackConfig
from conventions import SYSTEM_GROUP
from planes.account import Account
from planes.build import BuildPlane
from planes.compute import ComputePlane


def health_plane(
    cfg: StackConfig, account: Account, build: BuildPlane, compute: ComputePlane
) -> NodeFence | None:
    own = compute.own
    if own is None or not cfg.fenced_after_seconds or build.image_uri is None:
        return None
    pods = compute.pod_identity
    return NodeFence(
        "node-fence",
        NodeFenceArgs(
            provider=compute.provider,
            eks=own.eks,
            namespace=pods.namespace_name,
            image=build.image_uri,
            after_seconds=cfg.fenced_after_seconds,
            pod_placement=compute.placements[SYSTEM_GROUP].pod_placement(),
            region=cfg.region,
            account_id=account.account_id,
            autoscaling_group_names=[ng.autoscaling_group_name for ng in own.node_groups],
            waits_for=[r for r in (compute.system_nodes, pods.namespace) if r is not None],
        ),
        account.opts,
    )
