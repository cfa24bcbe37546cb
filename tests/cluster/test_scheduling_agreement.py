"""The plan's scheduling check (offline/scheduling.py) against the real scheduler, DaemonSet
controller and device plugins, on every template and example: kwok nodes shaped as the plan's
node groups (as many as each group may hold), the DaemonSets the plan renders from the real charts,
and each job's pods as Kueue admits them (its flavor's node labels and tolerations added). Where the
plan says a job fits, every pod is bound to a node of the group the plan names; where it names a
broken link after admission, some pod stays unschedulable; each DaemonSet runs on the groups the
plan says it lands on. A disagreement is a bug in the model.

Admission itself is Kueue's, not the scheduler's: a job the plan stops at admission is not sent.
Volumes are left out of the pods (the plan does not model them, and the harness has no storage)."""

from __future__ import annotations

import re

import pytest
from support.cluster.harness import CLUSTER_GROUP
from support.cluster.sent import DAEMONSET, bare_pod, daemonset, object_name
from support.cluster.stacks import PlannedStack, planned, planned_file, template_config
from support.paths import ROOT, shared_dir

from offline.nodes import NotChecked, plan_daemonsets
from offline.scheduling import _admission, _objects, check, job_manifests, named_pod_sets, referenced_objects

pytestmark = CLUSTER_GROUP

STACK_FILES = {
    **{p.stem.removeprefix("Pulumi."): p for p in sorted(ROOT.glob("Pulumi.*.yaml"))},
    **{f"example-{p.stem}": p for p in sorted((ROOT / "examples").glob("*.yaml"))},
}


def _without_nvidia_plugin(config: dict) -> None:
    config["trainstack:operators"] = {
        **config.get("trainstack:operators", {}),
        "nvidiaDevicePlugin": {"enabled": False},
    }


def _small_system_nodes(config: dict) -> None:
    config["trainstack:existingCluster"]["systemNodes"]["memoryGiB"] = 1


# Templates changed so that the plan names a broken link after admission: the real scheduler must
# leave a pod unschedulable there too.
BROKEN = {
    "dev-without-nvidia-plugin": ("dev", _without_nvidia_plugin),  # device plugins
    "local-on-1gib-nodes": ("local", _small_system_nodes),  # pods: the Ray head's memory
}


def _stack(name: str) -> PlannedStack:
    if name in BROKEN:
        template, change = BROKEN[name]
        config = template_config(template)
        change(config)
        return planned(name, config)
    return planned_file(name, STACK_FILES[name])


JOB = "trainstack.test/job"


class OnCluster:
    """One plan's nodes, DaemonSets and pods on the harness's cluster, in a namespace of its own
    (no plan waits for another's to be deleted), removed afterwards."""

    def __init__(self, cluster, stack: PlannedStack):
        self.cluster, self.stack = cluster, stack
        self.namespace = object_name(f"agreement-{stack.name}")
        self.nodes: dict[str, str] = {}  # node name -> group

    def __enter__(self):
        core = self.cluster.core
        core.create_namespace({"metadata": {"name": self.namespace}})
        self.cluster.wait(
            "default ServiceAccount",
            lambda: bool(
                core.list_namespaced_service_account(
                    self.namespace, field_selector="metadata.name=default"
                ).items
            ),
        )
        for node in self.stack.nodes:
            renamed = type(node)(**{**node.__dict__, "group": object_name(f"{self.stack.name}-{node.group}")})
            for name in self.cluster.add_nodes(renamed):
                self.nodes[name] = node.group
        return self

    def __exit__(self, *exc):
        self.cluster.delete_namespace(self.namespace)
        self.cluster.remove_nodes(list(self.nodes))

    def daemonsets(self, daemonsets) -> None:
        for ds in daemonsets:
            self.cluster.objects.apply(daemonset(ds, self.namespace))

    def daemonsets_created(self) -> bool:
        """The DaemonSet controller has made a pod for every node it chose, for every DaemonSet."""
        listed = self.cluster.objects.list("apps/v1", "DaemonSet", self.namespace)
        counts: dict[str, int] = {}
        for p in self.pods():
            key = (p.metadata.labels or {}).get(DAEMONSET)
            counts[key] = counts.get(key, 0) + 1
        return all(
            (d.get("status") or {}).get("observedGeneration") == d["metadata"]["generation"]
            and counts.get(d["metadata"]["name"], 0) == d["status"].get("desiredNumberScheduled", 0)
            for d in listed
        )

    def place(self, job: str, pod_sets: list[tuple[str, dict, int]]) -> dict[str, str | None]:
        """Sends the job's pods; once each is bound or unschedulable, removes them and answers the
        group each was bound to (None: unschedulable)."""
        names = []
        for pod_set, spec, count in pod_sets:
            for i in range(count):
                names.append(object_name(f"{job}-{pod_set}-{i}"))
                self.cluster.core.create_namespaced_pod(
                    self.namespace, bare_pod(names[-1], spec, {JOB: "yes"})
                )

        def mine() -> list:
            return [p for p in self.pods() if p.metadata.name in names]

        self.cluster.wait(f"{job}'s pods bound or unschedulable", lambda: _settled(mine()), 120)
        bound = {p.metadata.name: self.nodes.get(p.spec.node_name) for p in mine()}
        self.cluster.core.delete_collection_namespaced_pod(self.namespace, label_selector=f"{JOB}=yes")
        self.cluster.wait(f"{job}'s pods gone", lambda: not mine(), 60)
        return bound

    def pods(self) -> list:
        return self.cluster.core.list_namespaced_pod(self.namespace).items


def _settled(pods, running: bool = False) -> bool:
    """Every pod bound (and running, with `running`), or found unschedulable by the scheduler."""
    for p in pods:
        if p.spec.node_name:
            if running and p.status.phase != "Running":
                return False
            continue
        conditions = p.status.conditions or []
        if not any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions):
            return False
    return True


def _pod_sets(job: dict, ctx: dict) -> list[tuple[str, dict, int]]:
    """The job's pods as Kueue admits them: its flavor's node labels and tolerations added."""
    objects = ctx["objects"]  # a TrainJob's runtime
    _, assigned = _admission(job, ctx["ClusterQueue"], ctx["LocalQueue"], ctx["ResourceFlavor"], objects)
    found = []
    for pod_set, template, count in named_pod_sets(job, objects):
        flavor = ctx["ResourceFlavor"][assigned[pod_set]]["spec"]
        spec = dict(template["spec"])
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **(flavor.get("nodeLabels") or {})}
        spec["tolerations"] = [*(spec.get("tolerations") or []), *(flavor.get("tolerations") or [])]
        found.append((pod_set, spec, count))
    return found


@pytest.mark.parametrize("name", [*sorted(STACK_FILES), *BROKEN])
def test_the_plan_and_the_scheduler_agree(cluster, name):
    shared_dir("charts", "TRAINSTACK_CHARTS_DIR")
    stack = _stack(name)
    report = check(stack.run, stack.cfg)
    if name in BROKEN:
        assert not all(c.fits for c in report.chains), "the change no longer breaks a link in the plan"
    try:
        daemonsets = plan_daemonsets(stack.run)
    except NotChecked as err:
        pytest.fail(f"the plan could not render its DaemonSets: {err}")
    ctx = {k: _objects(stack.run, k) for k in ("ResourceFlavor", "ClusterQueue", "LocalQueue")}
    ctx["objects"] = referenced_objects(stack.run)
    where = _plan_groups(report)
    with OnCluster(cluster, stack) as on:
        on.daemonsets(daemonsets)
        cluster.wait("every DaemonSet's pods created", on.daemonsets_created, 120)
        cluster.wait(
            "every DaemonSet pod running or unschedulable", lambda: _settled(on.pods(), running=True), 120
        )
        cluster.device_plugins.sync()  # the plugins' resources on their nodes before any job pod
        cluster.scheduler_has_seen(list(on.nodes))
        placed = {p.metadata.name: on.nodes.get(p.spec.node_name) for p in on.pods()}
        for ds in daemonsets:
            label = object_name(ds.name)
            runs = {
                placed[p.metadata.name] for p in on.pods() if p.metadata.labels.get(DAEMONSET) == label
            } - {None}
            planned = _daemonset_groups(stack, ds)
            assert runs == planned, f"{name}: {ds.name} runs on groups {runs}, the plan says {planned}"
        # One job at a time, as the plan checks each job on its own (it does not model other jobs).
        for job in job_manifests(stack.run):
            chain = next(c for c in report.chains if c.job == job["metadata"]["name"])
            if chain.broken and chain.broken.startswith("admission"):
                continue
            bound = on.place(chain.job, _pod_sets(job, ctx))
            if chain.fits:
                assert all(bound.values()), (
                    f"{name}: the plan says {chain.line()}, but pods stay unschedulable: {bound}"
                )
                assert set(bound.values()) <= where[chain.job], (
                    f"{name}: {bound}, the plan says {chain.line()}"
                )
            else:
                assert not all(bound.values()), (
                    f"{name}: the plan says {chain.line()}, but every pod was bound: {bound}"
                )


def _plan_groups(report) -> dict[str, set[str]]:
    """Per job, the groups its chain's nodes link names."""
    found = {}
    for c in report.chains:
        nodes = next((link for link in c.links if link.startswith("nodes: ")), "")
        found[c.job] = set(re.findall(r"(?:^nodes: |, )([\w-]+) \(", nodes))
    return found


def _daemonset_groups(stack: PlannedStack, ds) -> set[str]:
    from offline.scheduling import _landing

    return {n.group for n in stack.nodes if ds.name not in _landing(n, [ds]).problems}
