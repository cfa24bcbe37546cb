"""The plan's scheduling check: can every job of the stack start, from the objects the stack sends?

Per job, a chain of four links, each checked with the rules of the system that applies it:

1. admission: the Workload Kueue would create (one PodSet per PyTorchJob replica type; a TrainJob's
   JobSet's replicated Job, built from its runtime; a RayJob's or RayCluster's head and worker
   groups, and a RayJob's submitter in K8sJobMode), each PodSet
   given the first flavor of its ClusterQueue whose node labels its pods select and whose taints
   they tolerate and that has quota left, charged against the flavors' nominal quota
   (kueue v0.19.2 `pkg/controller/jobs/*`, `pkg/scheduler/flavorassigner`);
2. nodes: the node group whose nodes the pods select and tolerate (for an autoscaled group, the
   autoscaler's template node from the Auto Scaling group's tags as well: it scales up only for a
   pod that fits it);
3. device plugins: an extended resource the pods request is advertised on that node only where its
   device plugin's DaemonSet (rendered from the real chart) schedules;
4. pods: every pod's requests within the node's allocatable less the DaemonSets landing there, and
   the group large enough for the pods.

`check(run, cfg)` returns a `Report`: one `Chain` per job and the DaemonSet coverage lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from components.jobs.kind import NO_OBJECTS, Objects
from components.jobs.kinds import KINDS
from conventions import EFA_RESOURCE, GPU_RESOURCE, QUEUE_LABEL
from domain.quota import shortfall
from offline.engine import PlanRun
from offline.nodes import Node, NotChecked, plan_daemonsets, plan_nodes
from offline.predicates import Amounts, add, placement_problem, pod_requests, taint_text, untolerated_taint
from offline.predicates import unmatched_affinity as _unmatched_affinity
from offline.topology import TopologyBroken, placement_words, tas_problem

KUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:"
JOB_TYPES = tuple(f"kubernetes:{k.api_version}:{k.name}" for k in KINDS.values())
# What a job's PodSets may read besides its own manifest (a TrainJob's runtime).
REFERENCED_TYPES = ("kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime",)

# --- Kueue's model of a job ----------------------------------------------------------------------


def named_pod_sets(job: dict, objects: Objects = NO_OBJECTS) -> list[tuple[str, dict, int]]:
    """(name, pod template, count) per PodSet, as the job's kind says Kueue builds its Workload;
    `objects`: what else the stack sends, by (kind, name) (referenced_objects)."""
    return KINDS[job["kind"]].pod_sets(job, objects)


def pod_sets(job: dict, objects: Objects = NO_OBJECTS) -> list[tuple[dict, int]]:
    """(pod template, count) per PodSet."""
    return [(template, count) for _, template, count in named_pod_sets(job, objects)]


def flavor_problem(pod: dict, flavor: dict) -> str | None:
    """Why Kueue's flavor assigner passes `flavor` over for `pod` (None when it may take it): only
    the flavor's label keys are compared with the pod's node selector and required node affinity;
    the flavor's node taints must be tolerated by the pod's tolerations and the flavor's own."""
    spec = pod["spec"]
    labels = flavor["spec"].get("nodeLabels") or {}
    selector = spec.get("nodeSelector") or {}
    for key, value in sorted(labels.items()):
        if key in selector and selector[key] != value:
            return f"nodeSelector {key}={selector[key]} is not its {key}={value}"
    affinity = _unmatched_affinity(spec, labels, keys=set(labels))
    if affinity:
        return f"{affinity} does not match its labels"
    tolerations = [*(spec.get("tolerations") or []), *(flavor["spec"].get("tolerations") or [])]
    taint = untolerated_taint(tolerations, flavor["spec"].get("nodeTaints") or [])
    return f"does not tolerate its taint {taint_text(taint)}" if taint else None


def matches(pod: dict, flavor: dict) -> bool:
    return flavor_problem(pod, flavor) is None


def requests(pod: dict) -> Amounts:
    """What a pod requests, as Kueue counts it (cpu millicores, memory GiB, devices in units)."""
    return pod_requests(pod["spec"])


def quota_of(queue: dict) -> dict[str, Amounts]:
    """Nominal quota per flavor of a ClusterQueue."""
    found = {}
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            found[flavor["name"]] = {
                r["name"]: requests(
                    {"spec": {"containers": [{"resources": {"requests": {r["name"]: r["nominalQuota"]}}}]}}
                )[r["name"]]
                for r in flavor["resources"]
            }
    return found


def admitted_demand(
    job: dict, queue: dict, flavors: dict[str, dict], objects: Objects = NO_OBJECTS
) -> dict[str, Amounts]:
    """What Kueue would charge the job's queue: each pod set on the first of the queue's flavors
    that it matches, as the ClusterQueue orders them. Raises ValueError when one matches none."""
    order = [f["name"] for g in queue["spec"]["resourceGroups"] for f in g["flavors"]]
    demand: dict[str, Amounts] = {}
    for name, template, count in named_pod_sets(job, objects):
        found = [f for f in order if f in flavors and matches(template, flavors[f])]
        if not found:
            raise ValueError(f"{job['metadata']['name']}: pod set {name} matches no flavor of its queue")
        charged = demand.setdefault(found[0], {})
        for resource, amount in requests(template).items():
            charged[resource] = charged.get(resource, 0) + amount * count
    return demand


# --- the chain -----------------------------------------------------------------------------------


@dataclass
class Chain:
    job: str
    links: list[str] = field(default_factory=list)  # the links that hold, in words
    broken: str | None = None  # the first that does not, "<link>: <why>"

    @property
    def fits(self) -> bool:
        return self.broken is None

    def line(self) -> str:
        if self.broken:
            return f"{self.job}: {' → '.join([*self.links, self.broken])}"
        return f"{self.job}: {' → '.join([*self.links, 'pods: fits'])}"


@dataclass
class Report:
    chains: list[Chain]
    daemonsets: list[str]  # coverage: which DaemonSets serve which groups, or why not
    daemonset_problems: list[str]

    def lines(self) -> list[str]:
        lines = ["Scheduling (admission → nodes → device plugins → pods):"]
        lines += [f"  {c.line()}" for c in self.chains] or ["  no jobs"]
        lines += [f"  DaemonSets: {d}" for d in self.daemonsets]
        return lines

    @property
    def never_start(self) -> list[Chain]:
        return [c for c in self.chains if not c.fits]


def _num(resource: str, amount) -> str:
    if resource == "cpu":
        return f"{amount / 1000:g}"
    if resource == "memory":
        return f"{round(amount, 2):g}Gi"
    return f"{amount:g}"


ORDER = ("cpu", "memory", GPU_RESOURCE, EFA_RESOURCE)


def _resource_order(k: str) -> tuple[int, str]:
    return (ORDER.index(k) if k in ORDER else len(ORDER), k)


def _amounts(a: Amounts) -> str:
    keys = sorted(a, key=_resource_order)
    return ", ".join(f"{k} {_num(k, a[k])}" for k in keys if a[k])


def body(reg) -> dict:
    """A Kubernetes object as it would be sent (offline.plan.manifest_of's, which imports this)."""
    return {k: v for k, v in reg.inputs.items() if k != "__defaults"}


def _objects(run: PlanRun, kind: str) -> dict[str, dict]:
    return {m["metadata"]["name"]: m for r in run.by_type(KUEUE + kind) for m in [body(r)]}


def job_manifests(run: PlanRun) -> list[dict]:
    return [body(r) for t in JOB_TYPES for r in run.by_type(t)]


def referenced_objects(run: PlanRun) -> Objects:
    """What jobs' PodSets read beyond their own manifests, by (kind, name)."""
    return {
        (m["kind"], m["metadata"]["name"]): m
        for t in REFERENCED_TYPES
        for r in run.by_type(t)
        for m in [body(r)]
    }


def _admission(
    job: dict, queues: dict, local: dict, flavors: dict, objects: Objects = NO_OBJECTS
) -> tuple[str, dict[str, str]]:
    """Kueue's assignment: (the link's words, pod set -> flavor). Raises _Broken."""
    queue_name = (job["metadata"].get("labels") or {}).get(QUEUE_LABEL)
    lq = local.get(queue_name or "")
    if not lq or lq["spec"]["clusterQueue"] not in queues:
        raise _Broken(f"admission: no LocalQueue {queue_name!r} with a ClusterQueue for it")
    cq = queues[lq["spec"]["clusterQueue"]]
    quota = quota_of(cq)
    covered = {r for g in cq["spec"]["resourceGroups"] for r in g["coveredResources"]}
    order = [f["name"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]]
    used: dict[str, Amounts] = {}
    assigned: dict[str, str] = {}
    every_tas = all(flavors.get(f, {}).get("spec", {}).get("topologyName") for f in order)
    try:
        sets = named_pod_sets(job, objects)
    except ValueError as err:
        raise _Broken(f"admission: {err}") from None
    for name, template, count in sets:
        need = {k: v * count for k, v in requests(template).items() if v}
        missing = sorted(set(need) - covered)
        if missing:
            raise _Broken(
                f"admission: pod set {name} requests {', '.join(missing)}, which {cq['metadata']['name']} does not cover"
            )
        why = []
        for f in order:
            problem = flavor_problem(template, flavors[f]) if f in flavors else "no such ResourceFlavor"
            problem = problem or tas_problem(template, flavors[f], every_tas, set(need), covered)
            if problem:
                why.append(f"{f}: {problem}")
                continue
            total = add(used.get(f, {}), need)
            # In a fixed order (cpu, memory, devices): the requests' own order varies between runs.
            counted = {k: total[k] for k in sorted(total, key=_resource_order) if k in covered}
            short = shortfall({f: counted}, {f: quota.get(f, {})})
            if short:
                why.append(f"{f}: {short[0]}")
                continue
            used[f] = total
            assigned[name] = f
            break
        else:
            raise _Broken(
                f"admission: pod set {name} ({_amounts(need)}) fits no flavor of {cq['metadata']['name']} ({'; '.join(why)})"
            )
    by_flavor: dict[str, list[str]] = {}
    for name, f in assigned.items():
        by_flavor.setdefault(f, []).append(name)
    words = "; ".join(f"{', '.join(n)} on {f}" for f, n in by_flavor.items())
    return f"admission: {cq['metadata']['name']} ({words})", assigned


class _Broken(Exception):
    pass


def _group_for(spec: dict, nodes: list[Node]) -> tuple[Node | None, list[str]]:
    why = []
    for node in nodes:
        problem = placement_problem(spec, node.labels, node.taints)
        if problem:
            why.append(f"group {node.group}: {problem}")
            continue
        if node.template:
            # The autoscaler scales a group up only for a pod its template node would take.
            problem = placement_problem(spec, node.template.labels, node.template.taints)
            if problem:
                why.append(f"group {node.group}: {problem} on the autoscaler's node template (ASG tags)")
                continue
        return node, why
    return None, why


@dataclass
class _Landing:
    """What lands on a group's nodes: DaemonSets, and the extended resources their plugins advertise."""

    daemonsets: list
    problems: dict[str, str]  # daemonset name -> why it does not schedule there
    advertised: Amounts
    reserved: Amounts


def _landing(node: Node, daemonsets: list | None) -> _Landing:
    if daemonsets is None:  # not checked: the hardware's devices, no DaemonSet requests
        return _Landing([], {}, dict(node.extended), {})
    landed, problems, advertised, reserved = [], {}, {}, {}
    for ds in daemonsets:
        problem = placement_problem(ds.spec, node.labels, node.taints, daemon=True)
        if problem:
            problems[ds.name] = problem
            continue
        landed.append(ds)
        reserved = add(reserved, ds.requests)
        if ds.advertises and node.extended.get(ds.advertises):
            advertised[ds.advertises] = node.extended[ds.advertises]
    return _Landing(landed, problems, advertised, reserved)


def _device_plugin(resource: str, daemonsets: list) -> str | None:
    return next((d.name for d in daemonsets if d.advertises == resource), None)


def _job_chain(job: dict, ctx: dict) -> Chain:
    chain = Chain(job["metadata"]["name"])
    try:
        words, assigned = _admission(job, ctx["queues"], ctx["local"], ctx["flavors"], ctx["objects"])
        chain.links.append(words)
        placed: list[tuple[str, dict, int, Node]] = []
        for name, template, count in named_pod_sets(job, ctx["objects"]):
            flavor = ctx["flavors"][assigned[name]]["spec"]
            # Kueue adds its flavor's node labels and tolerations to the pods it admits.
            spec = dict(template["spec"])
            spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **(flavor.get("nodeLabels") or {})}
            spec["tolerations"] = [*(spec.get("tolerations") or []), *(flavor.get("tolerations") or [])]
            node, why = _group_for(spec, ctx["nodes"])
            if node is None:
                detail = "; ".join(why) if why else "the plan has no nodes"
                raise _Broken(f"nodes: no node group takes pod set {name} ({detail})")
            placed.append((name, spec, count, node))
        groups = list(dict.fromkeys(n.group for *_, n in placed))
        chain.links.append("nodes: " + ", ".join(f"{g} ({_node(ctx, g).described})" for g in groups))
        daemonsets, not_checked = ctx["daemonsets"], ctx["not_checked"]
        devices = []
        for name, spec, _count, node in placed:
            land = ctx["landing"][node.group]
            for resource in (GPU_RESOURCE, EFA_RESOURCE):
                if not pod_requests(spec).get(resource) or not_checked:
                    continue
                plugin = _device_plugin(resource, daemonsets)
                if plugin is None:
                    raise _Broken(
                        f"device plugins: nothing advertises {resource} (no device plugin installed) for pod set {name} on group {node.group}"
                    )
                if plugin in land.problems:
                    raise _Broken(f"device plugins: {plugin} {land.problems[plugin]} on group {node.group}")
                if not land.advertised.get(resource):
                    raise _Broken(
                        f"device plugins: {plugin} runs on group {node.group}, but its {node.instance_type} has no {resource}"
                    )
            shown = {r: land.advertised[r] for r in (GPU_RESOURCE, EFA_RESOURCE) if r in land.advertised}
            devices += [f"{node.group} {_amounts(shown)}"] if shown else []
        devices = list(dict.fromkeys(devices))
        chain.links.append(
            f"device plugins: not checked: {not_checked}"
            if not_checked
            else "device plugins: " + ("; ".join(devices) if devices else "none needed")
        )
        _pods(placed, ctx)
        _topology(job, assigned, placed, ctx, chain)
    except _Broken as err:
        chain.broken = str(err)
    return chain


def _topology(job: dict, assigned: dict[str, str], placed: list, ctx: dict, chain: Chain) -> None:
    """Where Kueue's topology-aware scheduling puts the pod sets on flavors with a Topology."""
    queue = ctx["queues"][ctx["local"][job["metadata"]["labels"][QUEUE_LABEL]]["spec"]["clusterQueue"]]
    provisioned = bool((queue["spec"].get("admissionChecksStrategy") or {}).get("admissionChecks"))
    words = []
    for (name, template, count), (*_, node) in zip(named_pod_sets(job, ctx["objects"]), placed, strict=True):
        topology = ctx["topologies"].get(ctx["flavors"][assigned[name]]["spec"].get("topologyName"))
        if topology is None:
            continue
        layers = len(topology["spec"]["levels"]) - 1
        sets = ctx["account"].instance_topology(node.group, node.max_nodes, layers)
        try:
            words.append(placement_words(name, template, count, node.group, topology, sets, provisioned))
        except TopologyBroken as err:
            raise _Broken(f"topology: {err}") from None
    if words:
        chain.links.append("topology: " + "; ".join(words))


def _node(ctx: dict, group: str) -> Node:
    return next(n for n in ctx["nodes"] if n.group == group)


def _left(node: Node, land: _Landing, resource: str) -> str:
    """What a node of the group has of `resource`, and where the rest went."""
    kind = f"a {node.instance_type} node" if node.instance_type else "a node"
    total = {**node.allocatable, **land.advertised}.get(resource, 0)
    if resource in (GPU_RESOURCE, EFA_RESOURCE):
        return f"{kind} of group {node.group} advertises {_num(resource, total)}"
    taken = [(d.name, d.requests.get(resource, 0)) for d in land.daemonsets if d.requests.get(resource)]
    if not taken:
        return f"{kind} of group {node.group} has {_num(resource, total)} allocatable"
    shares = ", ".join(f"{n} {_num(resource, v)}" for n, v in taken)
    left = total - sum(v for _, v in taken)
    return (
        f"{kind} of group {node.group} has {_num(resource, max(0, left))} left of "
        f"{_num(resource, total)} allocatable after DaemonSets ({shares})"
    )


def _pods(placed: list[tuple[str, dict, int, Node]], ctx: dict) -> None:
    """Each pod within what its node has left after the DaemonSets; the group large enough for all
    the job's pods (packed first fit, largest first, as whole pods)."""
    packing: dict[str, list[tuple[str, Amounts]]] = {}
    free: dict[str, Amounts] = {}
    for name, spec, count, node in placed:
        land = ctx["landing"][node.group]
        left = {**node.allocatable, **land.advertised}
        left = {k: v - land.reserved.get(k, 0) for k, v in left.items()}
        free[node.group] = left
        want = {k: v for k, v in pod_requests(spec).items() if v}
        for resource, amount in want.items():
            have = left.get(resource, 0)
            if amount > have + 1e-9:
                raise _Broken(
                    f"pods: pod set {name} requests {resource} {_num(resource, amount)}, but {_left(node, land, resource)}"
                )
        packing.setdefault(node.group, []).extend([(name, want)] * count)
    for group, pods in packing.items():
        bins: list[Amounts] = []
        for _, want in sorted(pods, key=lambda p: (p[1].get("cpu", 0), p[1].get("memory", 0)), reverse=True):
            for b in bins:
                if all(v <= b.get(k, 0) + 1e-9 for k, v in want.items()):
                    b.update({k: b[k] - v for k, v in want.items()})
                    break
            else:
                bins.append({k: v - want.get(k, 0) for k, v in free[group].items()})
        node = _node(ctx, group)
        if len(bins) > node.max_nodes:
            raise _Broken(
                f"pods: {len(pods)} pods need {len(bins)} nodes of group {group}, which holds at most {node.max_nodes}"
            )


# DaemonSets the stack relies on, and which groups each must serve.
MUST_SERVE = {
    "nvidia-device-plugin": lambda n: bool(n.extended.get(GPU_RESOURCE)),
    "efa-device-plugin": lambda n: bool(n.extended.get(EFA_RESOURCE)),
    "dcgm-server": lambda n: bool(n.extended.get(GPU_RESOURCE)),
    "eks-node-monitoring-agent": lambda n: True,
    "fsx-csi-node": lambda n: True,
    "s3-csi-node": lambda n: True,
}


def _role(ds) -> str | None:
    if ds.advertises == EFA_RESOURCE:
        return "efa-device-plugin"
    if ds.advertises == GPU_RESOURCE:
        return "nvidia-device-plugin"
    return ds.name if ds.name in MUST_SERVE else None


def _coverage(ctx: dict) -> tuple[list[str], list[str]]:
    if ctx["not_checked"]:
        return [f"not checked: {ctx['not_checked']}"], []
    lines, problems = [], []
    for ds in ctx["daemonsets"]:
        role = _role(ds)
        if role is None:
            continue
        served, missed = [], []
        for node in ctx["nodes"]:
            if not MUST_SERVE[role](node):
                continue
            problem = ctx["landing"][node.group].problems.get(ds.name)
            (missed if problem else served).append(f"{node.group}" + (f" ({problem})" if problem else ""))
        if not served and not missed:  # dcgm-server on a stack without GPU nodes, say
            lines.append(f"{ds.name} ({ds.source}): no group's nodes need it")
            continue
        if missed:
            problems.append(f"{ds.name} ({ds.source}) does not schedule on group {'; '.join(missed)}")
        lines.append(
            f"{ds.name} ({ds.source}) on "
            + (", ".join(served) or "no group it must serve")
            + (f"; NOT on {'; '.join(missed)}" if missed else "")
        )
    return lines, problems


def _index(order: list[str], name: str) -> int:
    return order.index(name) if name in order else len(order)


def check(run: PlanRun, cfg=None) -> Report:
    """The scheduling check of a plan; `cfg` (the parsed stack config) describes the nodes of a
    cluster the stack did not create."""
    ctx: dict = {
        "flavors": _objects(run, "ResourceFlavor"),
        "queues": _objects(run, "ClusterQueue"),
        "local": _objects(run, "LocalQueue"),
        "topologies": _objects(run, "Topology"),
        "objects": referenced_objects(run),
        "account": run.account,
        "nodes": plan_nodes(run, cfg),
        "not_checked": None,
        "daemonsets": None,
    }
    try:
        ctx["daemonsets"] = plan_daemonsets(run)
    except NotChecked as err:
        ctx["not_checked"] = str(err)
    ctx["landing"] = {n.group: _landing(n, ctx["daemonsets"]) for n in ctx["nodes"]}
    order = list(run.outputs.get("jobs") or {})  # as config lists them (registration order varies)
    jobs = sorted(
        job_manifests(run), key=lambda j: (_index(order, j["metadata"]["name"]), j["metadata"]["name"])
    )
    chains = [_job_chain(job, ctx) for job in jobs]
    lines, problems = _coverage(ctx)
    return Report(chains, lines, problems)
