"""Operators plane: device plugins, the training operator and KubeRay, on the system nodes."""

from __future__ import annotations

from components.operators import ClusterOperators, ClusterOperatorsArgs, HelmOperator
from config import StackConfig
from conventions import SYSTEM_GROUP
from planes.compute import ComputePlane


def helm_operator(c) -> HelmOperator:
    return HelmOperator(c.enabled, c.version, c.values)


def operators_plane(cfg: StackConfig, compute: ComputePlane) -> ClusterOperators:
    ops = cfg.operators
    helm = helm_operator
    return ClusterOperators(
        "operators",
        ClusterOperatorsArgs(
            provider=compute.provider,
            system_nodes=compute.system_nodes,
            system_selector=compute.placements[SYSTEM_GROUP].node_selector,
            any_gpu=bool(cfg.gpu_node_groups),
            any_efa=any(g.efa for g in cfg.gpu_node_groups),
            nvidia_device_plugin=helm(ops.nvidia_device_plugin),
            efa_device_plugin=helm(ops.efa_device_plugin),
            kuberay=helm(ops.kuberay),
            training_operator_enabled=ops.training_operator.enabled,
            training_operator_ref=ops.training_operator.ref,
        ),
    )
