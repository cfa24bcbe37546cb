"""Queueing plane: a Kueue queue per node group sized from what its nodes offer, and the cluster
autoscaler for the groups it scales per job."""

from __future__ import annotations

from components.operators import ClusterOperators
from components.queueing import Queueing, QueueingArgs
from config import StackConfig
from config.placements import group_network_layers
from conventions import SYSTEM_GROUP
from domain.names import eks_cluster_name
from domain.quota import QueueSpec
from planes.compute import ComputePlane
from planes.operators import helm_operator


def queueing_plane(cfg: StackConfig, compute: ComputePlane, operators: ClusterOperators) -> Queueing:
    by_group = compute.placements
    specs = [QueueSpec(by_group[SYSTEM_GROUP], cfg.system_node_count, provisioned=False)]
    specs += [
        QueueSpec(
            by_group[g.name],
            g.node_count,
            provisioned=cfg.autoscaled(g),
            network_layers=group_network_layers(cfg, g),
        )
        for g in cfg.gpu_node_groups
    ]
    q, cc = cfg.queueing, cfg.cluster
    pods = compute.pod_identity
    autoscaler = compute.own.autoscaler_identity if compute.own else None
    return Queueing(
        "queueing",
        QueueingArgs(
            provider=compute.provider,
            system_nodes=compute.system_nodes,
            operators=[
                r
                for r in (operators.training_operator, operators.trainer, operators.kuberay_crds)
                if r is not None
            ],
            namespace=pods.namespace,
            namespace_name=pods.namespace_name,
            queues=specs,
            kueue=operators.kueue,
            cluster_autoscaler=helm_operator(
                cfg.operators.cluster_autoscaler, cfg.operators.chart_repository
            ),
            cluster_name=eks_cluster_name(cfg.stack),
            system_selector=by_group[SYSTEM_GROUP].node_selector,
            region=cfg.region,
            kubernetes_version=cc.kubernetes_version,
            idle_node_minutes=q.idle_node_minutes,
            pods_ready_timeout_minutes=q.pods_ready_timeout_minutes,
            max_node_provision_minutes=q.max_node_provision_minutes,
            autoscaler_identity=autoscaler.association if autoscaler else None,
            max_node_startup_minutes=cfg.autoscaler_startup_minutes(),
        ),
    )
