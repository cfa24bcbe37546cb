"""What the config says one node of each group offers a job (domain.placement), from the hardware
EC2 described for its type (config/instance_facts.py), and the system nodes from the catalog or, on
a cluster the stack did not create, from the nodes the config describes. The config checks size
queues with these; the program sizes them from the same EC2 answer."""

from __future__ import annotations

from config.node_groups import GpuNodeGroupConfig
from config.stack_config import StackConfig
from conventions import SYSTEM_GROUP
from domain.catalog import INSTANCE_TYPES
from domain.node_roles import group_selector
from domain.placement import Placement, gpu_placement, system_placement
from domain.topology import network_layers


def config_system_placement(c: StackConfig) -> Placement | None:
    """What a CPU job gets on a system node: the system group's type from the catalog, or the nodes
    an existing cluster describes; None for a type outside the catalog (reported on its own)."""
    if c.existing_cluster.named:
        described = c.existing_cluster.system_nodes
        return system_placement(
            "", described.cpus, described.memory_gib, 0.0, selector=described.node_selector
        )
    system = c.cluster.system_node_group
    cpu = INSTANCE_TYPES.get(system.instance_type)
    if cpu is None:
        return None
    return system_placement(system.instance_type, cpu.vcpus, cpu.memory_gib, cpu.hourly_usd or 0.0)


def catalog_placement(g: GpuNodeGroupConfig, hourly_usd: float | None = 0.0) -> Placement:
    """A group's node as EC2 describes its type (a CPU group's GPUs, were its type to have any,
    are never asked for); on an existing cluster, found by its selector."""
    it = g.instance
    efa = it.max_efa_interfaces if g.efa else 0
    selector = g.node_selector or group_selector(g.name, g.gpu)
    gpus = it.gpus if g.gpu else 0
    return gpu_placement(
        g.name,
        g.instance_type,
        gpus,
        efa,
        it.vcpus,
        it.memory_gib,
        hourly_usd,
        selector=selector,
        hyperpod=g.hyperpod,
    )


def group_network_layers(c: StackConfig, g: GpuNodeGroupConfig) -> int:
    """The network layers EKS labels the group's nodes with, where the stack makes those nodes: on a
    cluster it did not create nothing says its nodes carry the labels (a node without them is no
    capacity to Kueue's topology-aware scheduling, so its jobs would never be admitted)."""
    return 0 if c.existing_cluster.named else network_layers(g.instance_type)


def placements(c: StackConfig) -> dict[str, Placement | None]:
    """What one node of each group offers a job's pods, the system group's included, priced: the one
    builder the program uses on a cluster it creates and on one it attaches to."""
    found = {SYSTEM_GROUP: config_system_placement(c)}
    return found | {g.name: catalog_placement(g, g.hourly_usd) for g in c.gpu_node_groups}
