"""Where EC2 puts a node in its network, as EKS labels it, and how a job asks Kueue to keep its gang
close in it.

EC2 describes the network place of some instance types (DescribeInstanceTopology): a set of network
nodes, one per layer, top layer first; three layers on most types, four on p6-b200 and p6-b300
(EC2 User Guide, "Prerequisites for Amazon EC2 topology", Instance types). EKS labels such nodes
`topology.k8s.aws/network-node-layer-1` to `-N` with them (EKS User Guide, "Place distributed AI/ML
workloads with network topology labels"). Kueue's topology-aware scheduling reads a `Topology`
(levels of node labels, broadest first, `kubernetes.io/hostname` last) named by a ResourceFlavor's
`topologyName`, and a PodSet's annotation asks for one domain of a level (kueue v0.19.2
apis/kueue/v1beta2/topology_types.go; pkg/controller/jobframework/tas.go
podSetTopologyRequestBuilder.Build).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from conventions import HOSTNAME_LABEL, network_layer_label

# The instance types EC2 returns network nodes for, by the number of layers.
_THREE_LAYER_FAMILIES = {
    "g6e": ("xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge", "48xlarge"),
    "g7e": ("2xlarge", "4xlarge", "8xlarge", "12xlarge", "24xlarge", "48xlarge"),
    "p3dn": ("24xlarge",),
    "p4d": ("24xlarge",),
    "p4de": ("24xlarge",),
    "p5": ("48xlarge",),
    "p5e": ("48xlarge",),
    "p5en": ("48xlarge",),
    "p6e-gb200": ("36xlarge",),
    "trn1": ("2xlarge", "32xlarge"),
    "trn1n": ("32xlarge",),
    "trn2": ("48xlarge",),
    "trn2u": ("48xlarge",),
}
NETWORK_LAYERS = {f"{family}.{size}": 3 for family, sizes in _THREE_LAYER_FAMILIES.items() for size in sizes}
NETWORK_LAYERS |= {"p6-b200.48xlarge": 4, "p6-b300.48xlarge": 4}

# Kueue's PodSet annotations (kueue v0.19.2 apis/kueue/v1beta2/topology_types.go).
REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
TOPOLOGY_ANNOTATIONS = (REQUIRED_ANNOTATION, PREFERRED_ANNOTATION, UNCONSTRAINED_ANNOTATION)

JobPlacement = Literal["required", "preferred", "any"]
PLACEMENTS: tuple[JobPlacement, ...] = ("required", "preferred", "any")


def network_layers(instance_type: str) -> int:
    """The network layers EKS labels a node of this type with (0: none)."""
    return NETWORK_LAYERS.get(instance_type, 0)


def topology_name(layers: int) -> str:
    """The stack's Kueue Topology for nodes labelled with `layers` network layers."""
    return f"trainstack-network-{layers}"


def levels(layers: int) -> list[str]:
    """The Topology's node labels, broadest first; the node itself last, so Kueue assigns pods to
    nodes and can replace a failed one (its hot swap needs the hostname level)."""
    return [*(network_layer_label(n) for n in range(1, layers + 1)), HOSTNAME_LABEL]


def default_placement(efa: bool) -> JobPlacement:
    """An EFA group's jobs talk over the network all step long: they prefer one block of it."""
    return "preferred" if efa else "any"


def placement_level(placement: JobPlacement, layers: int) -> str | None:
    """The level a job asks for: `preferred` the bottom network layer, the closest nodes (Kueue
    climbs a level at a time when the gang does not fit there); `required` the layer above it,
    whose one network node the whole gang must share. None for `any`."""
    if placement == "preferred":
        return network_layer_label(layers)
    if placement == "required":
        return network_layer_label(layers - 1)
    return None


def pod_annotations(placement: JobPlacement, layers: int) -> dict[str, str]:
    """The annotation on the pods of a job's group. On a flavor with a Topology every PodSet must
    ask for topology (`any`: unconstrained): Kueue gives a PodSet that asks for none no TAS flavor
    unless every flavor of its ClusterQueue has one (kueue v0.19.2
    pkg/scheduler/flavorassigner/tas_flavorassigner.go checkPodSetAndFlavorMatchForTAS)."""
    if not layers:
        return {}
    level = placement_level(placement, layers)
    if placement == "required":
        return {REQUIRED_ANNOTATION: level}
    if placement == "preferred":
        return {PREFERRED_ANNOTATION: level}
    return {UNCONSTRAINED_ANNOTATION: "true"}


def domains(node_sets: Sequence[Sequence[str]], depth: int) -> dict[tuple[str, ...], int]:
    """Instances per domain of a level: `node_sets` as DescribeInstanceTopology answers them (top
    layer first), `depth` the level's layer number (1: the broadest)."""
    found: dict[tuple[str, ...], int] = {}
    for nodes in node_sets:
        key = tuple(nodes[:depth])
        found[key] = found.get(key, 0) + 1
    return found
