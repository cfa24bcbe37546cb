"""The scheduling check's view of Kueue's topology-aware scheduling (kueue v0.19.2).

1. Which flavor a PodSet may take: one that asks for topology, only a flavor with a Topology (or one
   none of whose resources it requests); one that asks for none, no flavor with a Topology unless
   every flavor of its ClusterQueue has one (pkg/scheduler/flavorassigner/tas_flavorassigner.go,
   checkPodSetAndFlavorMatchForTAS, isTASImplied).
2. Where its pods land: the domains of the level it asks for, from DescribeInstanceTopology's answer
   for the group's nodes at its largest size (the offline account's, or an `instance-topology:`
   fact): `required` needs one domain holding every pod; `preferred` climbs a level at a time from
   the one asked for and spreads over several domains only when none holds them
   (site/content/en/docs/concepts/topology_aware_scheduling.md).

With the ProvisioningRequest admission check Kueue reserves quota, waits for the check, and only
then assigns the topology, from the nodes that are Ready by then (podSetTopologyRequest delays it on
the first pass; NeedsSecondPass retries it with a backoff of 1 s to 30 s while the check is Ready and
the workload not admitted). On AWS the check is Ready before the new nodes join (components/queueing.py),
so the assignment waits for them: provisioning decides how many nodes come, the topology which of
them each pod gets, and a `required` gang whose new nodes share no domain stays unadmitted, holding
its quota, until nodes that do are there.
"""

from __future__ import annotations

from domain.topology import (
    PREFERRED_ANNOTATION,
    REQUIRED_ANNOTATION,
    TOPOLOGY_ANNOTATIONS,
    UNCONSTRAINED_ANNOTATION,
    domains,
)


class TopologyBroken(Exception):
    pass


def requested(template: dict) -> dict[str, str]:
    """The PodSet's topology annotations (kueue jobframework tas.go reads them from the pod template)."""
    found = (template.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in found.items() if k in TOPOLOGY_ANNOTATIONS}


def tas_problem(
    template: dict, flavor: dict, every_flavor_tas: bool, requests: set[str], covered: set[str]
) -> str | None:
    """Why Kueue passes `flavor` over for this PodSet on topology grounds (None: it may take it)."""
    asks = bool(requested(template)) or every_flavor_tas
    has_topology = bool(flavor["spec"].get("topologyName"))
    if asks and not has_topology and requests & covered:
        return "has no Topology, and the pods ask for topology-aware scheduling"
    if not asks and has_topology:
        return f"supports only topology-aware scheduling (Topology {flavor['spec']['topologyName']}), and the pods ask for none"
    return None


def _short(label: str) -> str:
    return label.rsplit("/", 1)[-1]


def placement_words(
    name: str,
    template: dict,
    count: int,
    group: str,
    topology: dict,
    node_sets: list[list[str]],
    provisioned: bool,
) -> str:
    """The link's words for one PodSet on a flavor with a Topology; raises TopologyBroken when a
    `required` one fits no domain."""
    labels = [lvl["nodeLabel"] for lvl in topology["spec"]["levels"]]
    asked = requested(template)
    when = " once the provisioned nodes are Ready" if provisioned else ""
    facts = f"simulated DescribeInstanceTopology of {len(node_sets)} nodes; fact instance-topology:{group} gives yours"
    if UNCONSTRAINED_ANNOTATION in asked or not asked:
        return f"pod set {name}: any of group {group}'s nodes{when}"
    level = asked.get(REQUIRED_ANNOTATION) or asked[PREFERRED_ANNOTATION]
    if level not in labels:
        raise TopologyBroken(
            f"pod set {name} asks for level {level}, which Topology {topology['metadata']['name']} lacks"
        )
    depth = labels.index(level) + 1

    def largest(d: int) -> int:
        return 1 if d == len(labels) else max(domains(node_sets, d).values(), default=0)

    if REQUIRED_ANNOTATION in asked:
        most = largest(depth)
        if most < count:
            raise TopologyBroken(
                f"pod set {name} ({count} pods) requires one {_short(level)} domain, but at most {most} "
                f"of group {group}'s nodes share one ({facts})"
            )
        return f"pod set {name}: one {_short(level)} domain (required){when}"
    for d in range(depth, 0, -1):
        if largest(d) >= count:
            if d == depth:
                return f"pod set {name}: one {_short(level)} domain (preferred){when}"
            return (
                f"pod set {name}: prefers one {_short(level)} domain; the closest that holds its {count} "
                f"pods is one {_short(labels[d - 1])} domain ({facts}){when}"
            )
    spread = len(domains(node_sets, 1))
    return (
        f"pod set {name}: prefers one {_short(level)} domain; none holds its {count} pods: spread over "
        f"{spread} {_short(labels[0])} domains ({facts}){when}"
    )
