"""Topology-aware placement on the real Kueue: the prod template's TrainJob on a p5 group whose
nodes EC2 puts in the network as a DescribeInstanceTopology fact says, with the stack's Topology,
flavor, queues and ClusterTrainingRuntime, and kwok nodes labelled as EKS labels them
(topology.k8s.aws/network-node-layer-N). Where the plan says the gang fits at the level it asks
for, Kueue admits it and its pods are bound inside one domain of that level; where the plan names a
broken topology link, Kueue does not admit it. (Without the cluster autoscaler, which is not built
here, the group is fixed-size: Kueue's ProvisioningRequest check is not on its queue.)"""

from __future__ import annotations

from dataclasses import replace

import pytest
from support.cluster.harness import CLUSTER_GROUP
from support.cluster.objects import admitted_jobs
from support.cluster.sent import JOB_KINDS, daemonset, remove_sent, sent_objects
from support.cluster.stacks import planned, template_config

from conventions import HEALTH_FAILED_TAINT_KEY, HEALTH_STARTUP_TAINT, network_layer_label
from offline.nodes import plan_daemonsets
from offline.scheduling import check

pytestmark = CLUSTER_GROUP

KEEPS_RUNNING = "trainstack.test/keeps-running"  # support/cluster/pod-keeps-running.yaml
# The health gate's startup taint as the node carries it (EKS's effect spelling becomes the API's).
STARTUP_TAINT = {**HEALTH_STARTUP_TAINT, "effect": "NoSchedule"}

JOB = "llama-1b-fsdp"
PLUGINS = "tas-plugins"
SHARED = ["nn-spine-1", "nn-spine-2"]
# Per case: each node's network nodes, top layer first; the job's placement; the level it asks for.
CASES = {
    # Two blocks of two: a 2-node gang preferring one block gets one.
    "preferred-one-block": (
        [[*SHARED, "nn-block-a"], [*SHARED, "nn-block-a"], [*SHARED, "nn-block-b"], [*SHARED, "nn-block-b"]],
        "preferred",
        3,
    ),
    # Every node under its own layer-2 network node: a gang that requires one cannot have it.
    "required-apart": (
        [["nn-1", f"nn-2-{i}", f"nn-3-{i}"] for i in range(4)],
        "required",
        2,
    ),
}


def stack_for(case: str):
    topology, placement, _ = CASES[case]
    return planned_stack(case, topology, placement)


def planned_stack(case: str, topology: list[list[str]], placement: str):
    config = template_config("prod")
    config["trainstack:operators"] = {"clusterAutoscaler": {"enabled": False}}
    config["trainstack:gpuNodeGroups"][0]["nodeCount"] = len(topology)
    job = next(j for j in config["trainstack:jobs"] if j["name"] == JOB)
    config["trainstack:jobs"] = [{**job, "placement": placement}]
    return planned(f"tas-{case}", config, facts={"instance-topology:p5": topology})


@pytest.fixture
def on_cluster(cluster, operators, case):
    """What each case lays on the cluster, removed afterwards: its nodes, the device plugins'
    DaemonSets in a namespace of the case's own, and the stack's objects (the namespaced ones with
    their namespace). The cases send the same stack objects: each waits for the last one's to go,
    once its nodes are laid (the namespace controller empties the last one's namespace meanwhile)."""
    plugins = f"{PLUGINS}-{case}"
    laid: dict[str, list] = {"nodes": [], "objects": [], "plugins": plugins}
    cluster.core.create_namespace({"metadata": {"name": plugins}})
    yield laid
    remove_sent(cluster, laid["objects"])
    cluster.delete_namespace(plugins)
    cluster.remove_nodes(laid["nodes"])


def the_workload(cluster, namespace: str) -> dict:
    """The job's Kueue Workload ({} until Kueue made it)."""
    found = cluster.objects.list("kueue.x-k8s.io/v1beta2", "Workload", namespace)
    return found[0] if found else {}


def gang_pods(cluster, namespace: str) -> list:
    selector = f"jobset.sigs.k8s.io/jobset-name={JOB}"
    return cluster.core.list_namespaced_pod(namespace, label_selector=selector).items


def tried(workload: dict) -> bool:
    """Kueue has tried to fit it: its QuotaReserved condition says why not."""
    conditions = (workload.get("status") or {}).get("conditions") or []
    return any(c["type"] == "QuotaReserved" and c["status"] == "False" for c in conditions)


def lay(
    cluster,
    on_cluster,
    stack,
    topology: list[list[str]],
    burning_in: tuple[int, ...] = (),
    running: bool = False,
) -> None:
    """The case's p5 nodes, labelled with their network nodes (those in `burning_in` still carrying
    the health gate's startup taint), their device plugins, then the stack's objects (with `running`,
    the runtime's pods keep running: support/cluster/pod-keeps-running.yaml)."""
    p5 = next(n for n in stack.nodes if n.group == "p5")
    for i, network_nodes in enumerate(topology):
        labels = {network_layer_label(n + 1): name for n, name in enumerate(network_nodes)}
        taints = [*p5.taints, *([dict(STARTUP_TAINT)] if i in burning_in else [])]
        node = replace(p5, group=f"tas-p5-{i}", labels={**p5.labels, **labels}, taints=taints)
        on_cluster["nodes"] += cluster.add_nodes(node, 1)
    plugins = [ds for ds in plan_daemonsets(stack.run) if "device-plugin" in ds.name]
    for ds in plugins:
        cluster.objects.apply(daemonset(ds, on_cluster["plugins"]))
    cluster.wait(
        "a device plugin pod running on every p5 node",
        lambda: (
            len(
                {
                    p.spec.node_name
                    for p in cluster.core.list_namespaced_pod(on_cluster["plugins"]).items
                    if p.status.phase == "Running"
                }
            )
            == len(topology)
        ),
        120,
    )
    cluster.device_plugins.sync()
    cluster.scheduler_has_seen(on_cluster["nodes"])
    cluster.settle()
    for obj in sent_objects(stack):
        if running and obj["kind"] == "ClusterTrainingRuntime":
            for replicated in obj["spec"]["template"]["spec"]["replicatedJobs"]:
                pod = replicated["template"]["spec"]["template"]
                pod.setdefault("metadata", {}).setdefault("annotations", {})[KEEPS_RUNNING] = "true"
        cluster.objects.apply(obj)
        on_cluster["objects"].append(obj)


@pytest.mark.parametrize("case", sorted(CASES))
def test_kueue_places_the_gang_where_the_plan_says(cluster, on_cluster, case):
    topology, _, level = CASES[case]
    stack = stack_for(case)
    (chain,) = [c for c in check(stack.run, stack.cfg).chains if c.job == JOB]
    lay(cluster, on_cluster, stack, topology)
    (job,) = [o for o in on_cluster["objects"] if o["kind"] in JOB_KINDS]
    namespace = job["metadata"]["namespace"]

    if not chain.fits:
        assert chain.broken.startswith("topology: "), chain.line()
        cluster.wait("Kueue tried to fit the gang", lambda: tried(the_workload(cluster, namespace)), 120)
        assert JOB not in admitted_jobs(cluster.objects, namespace), (
            f"the plan says {chain.line()}, but Kueue admitted it"
        )
        return
    cluster.wait("the gang admitted", lambda: JOB in admitted_jobs(cluster.objects, namespace), 120)
    # Placed by topology-aware scheduling (the PodSet's assignment names its domains), not by chance.
    (assignment,) = the_workload(cluster, namespace)["status"]["admission"]["podSetAssignments"]
    assert assignment.get("topologyAssignment"), assignment

    cluster.wait(
        "the gang's pods bound",
        lambda: (
            len(gang_pods(cluster, namespace)) == 2
            and all(p.spec.node_name for p in gang_pods(cluster, namespace))
        ),
        120,
    )
    domains = {
        cluster.core.read_node(p.spec.node_name).metadata.labels[network_layer_label(level)]
        for p in gang_pods(cluster, namespace)
    }
    assert len(domains) == 1, f"the plan says {chain.line()}, but Kueue spread the gang over {domains}"


def plain(taint) -> dict:
    """A node's taint as the API takes it back."""
    return {"key": taint.key, "value": taint.value, "effect": taint.effect}


# Two blocks of two; the first block's nodes are still in their burn-in.
BURNING_IN = ([[*SHARED, "nn-block-a"], [*SHARED, "nn-block-a"], [*SHARED, "nn-block-b"], [*SHARED, "nn-block-b"]], "required", 3)  # fmt: skip


@pytest.mark.parametrize("case", ["burning-in"])
def test_kueue_places_a_gang_only_on_nodes_that_passed_the_health_gate(cluster, on_cluster, case):
    """Kueue's topology-aware scheduling leaves out a node whose NoSchedule taint the pods do not
    tolerate (kueue v0.19.2 pkg/cache/scheduler/scheduling_simulator_default.go): the gang that
    requires one block is admitted to the block whose nodes passed, never to the one in burn-in."""
    topology, placement, level = BURNING_IN
    stack = planned_stack(case, topology, placement)
    lay(cluster, on_cluster, stack, topology, burning_in=(0, 1), running=True)
    (job,) = [o for o in on_cluster["objects"] if o["kind"] in JOB_KINDS]
    namespace = job["metadata"]["namespace"]
    cluster.wait("the gang admitted", lambda: JOB in admitted_jobs(cluster.objects, namespace), 120)

    cluster.wait(
        "the gang's pods bound",
        lambda: (
            len(gang_pods(cluster, namespace)) == 2
            and all(p.spec.node_name for p in gang_pods(cluster, namespace))
        ),
        120,
    )
    domains = {
        cluster.core.read_node(p.spec.node_name).metadata.labels[network_layer_label(level)]
        for p in gang_pods(cluster, namespace)
    }
    assert domains == {"nn-block-b"}, f"the gang landed on {domains}, nodes still in their burn-in among them"

    # The gate takes a node of the running gang out (the monitoring agent found a fatal Xid): its
    # NoExecute taint evicts the pod there, Kueue sees the node's taint under a topology assignment
    # (TASReplaceNodeOnNodeTaints, on in 0.19) and, with no healthy node left in that block,
    # evicts the workload; once the other block has passed its burn-in the gang runs there.
    bad = on_cluster["nodes"][2]
    node = cluster.core.read_node(bad)
    failed = {"key": HEALTH_FAILED_TAINT_KEY, "value": "REBOOT", "effect": "NoExecute"}
    cluster.core.patch_node(bad, {"spec": {"taints": [*(plain(t) for t in node.spec.taints or []), failed]}})

    def evicted() -> bool:
        conditions = (the_workload(cluster, namespace).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Evicted" and c["status"] == "True" for c in conditions)

    cluster.wait("Kueue evicting the gang off the failed node", evicted, 120)
    for passed in on_cluster["nodes"][:2]:
        kept = [
            plain(t)
            for t in cluster.core.read_node(passed).spec.taints or []
            if t.key != HEALTH_STARTUP_TAINT["key"]
        ]
        cluster.core.patch_node(passed, {"spec": {"taints": kept}})

    def readmitted_to_block_a() -> bool:
        """Admitted again, its topology assignment naming the first block's nodes only."""
        status = the_workload(cluster, namespace).get("status") or {}
        admitted = any(
            c["type"] == "Admitted" and c["status"] == "True" for c in status.get("conditions") or []
        )
        if not admitted or not status.get("admission"):
            return False
        (assignment,) = status["admission"]["podSetAssignments"]
        (slice_,) = assignment["topologyAssignment"]["slices"]
        roots = slice_["valuesPerLevel"][0]["individual"]["roots"]
        return sorted(roots) == ["0", "1"]

    cluster.wait("the gang admitted again, to the block that passed meanwhile", readmitted_to_block_a, 300)
    # Its pods follow once the evicted one is gone: a kubelet would end it at once; kwok leaves it
    # Terminating, and the Job replaces a pod only once it has ended, so the pods are not awaited here.
