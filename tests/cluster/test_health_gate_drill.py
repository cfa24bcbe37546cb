"""New GPU nodes prove themselves before they train: the stack's health gate (components/health_gate.py,
its program workload/trainer/health_gate.py) on the real API server, scheduler and DaemonSet
controller, with moto's Auto Scaling group behind the nodes.

Three nodes of a burnt-in group register with the startup taint and the GPU taint. The NVIDIA device
plugin's DaemonSet, rendered from its chart with the stack's values, runs on them under both taints
(so their GPUs are advertised); the gate, rendered as the component renders it and run as its
program with its service account's credentials, starts one burn-in pod on each. The burn-ins end as
the burn-in's programs would (their termination messages are those programs' own output on the
outputs in tests/workload/recorded/health): two pass, one finds a failed row remap. A training pod
sent before any verdict waits; it binds to a passed node and never to the failed one, which carries
the NoExecute taint and whose instance its Auto Scaling group is told is unhealthy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.charts import helm_template
from support.cluster.cloud import REGION, auto_scaling_group
from support.cluster.harness import CLUSTER_GROUP
from support.cluster.kwok import node_object, node_status
from support.cluster.pods import OperatorPods
from support.cluster.stacks import PREBUILT_IMAGE
from support.paths import shared_dir
from trainer import health_checks as hc

from components.health_gate import (
    NAME,
    GatedGroup,
    cluster_role,
    deployment_spec,
    events_role,
    namespace_role,
)
from components.operators import nvidia_device_plugin_values
from conventions import (
    GPU_NODE_LABEL,
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
    GPU_TOLERATION,
    HEALTH_FAILED_TAINT_KEY,
    HEALTH_LABEL,
    HEALTH_MODE_LABEL,
    HEALTH_RESULT_ANNOTATION,
    HEALTH_STARTUP_TAINT_KEY,
    NODE_GROUP_LABEL,
)
from domain.catalog import catalog_instance
from domain.operators import RELEASES
from offline.nodes import Node

pytestmark = CLUSTER_GROUP

NAMESPACE = "health-gate"  # the gate's pod: the harness runs it as its program
BURN_IN = "burn-in"  # its burn-in pods and floors: kwok runs them with the results the test writes
GROUP = "gated"
POOL = {"trainstack.test/pool": "health-gate"}
GPU_NODES = Node(
    group=GROUP,
    instance_type=None,
    max_nodes=3,
    labels={
        **POOL,
        **GPU_NODE_LABEL,
        NODE_GROUP_LABEL: GROUP,
        GPU_PRESENT_LABEL: "true",
        HEALTH_MODE_LABEL: "burnIn",
    },
    taints=[
        {"key": GPU_RESOURCE, "value": "true", "effect": "NoSchedule"},
        {"key": HEALTH_STARTUP_TAINT_KEY, "value": "burn-in", "effect": "NoSchedule"},
    ],
    allocatable={"cpu": 4000, "memory": 16},
    extended={GPU_RESOURCE: 8},
)
GATE_POOL = {"trainstack.test/pool": "health-gate-system"}
GATE_NODE = Node(
    group="health-gate-system",
    instance_type=None,
    max_nodes=1,
    labels=GATE_POOL,
    taints=[],
    allocatable={"cpu": 4000, "memory": 16},
)
GATED = GatedGroup(GROUP, "burnIn", "p5.48xlarge", catalog_instance("p5.48xlarge"), False, 3, 2, 0.8)
RECORDED = Path(__file__).parents[1] / "workload" / "recorded" / "health"
RBAC = "rbac.authorization.k8s.io/v1"


def recorded(name: str) -> str:
    return (RECORDED / name).read_text()


@pytest.fixture(scope="module")
def aws():
    with auto_scaling_group("gpu-gated", 3, 0) as cloud:
        yield cloud.env, cloud.autoscaling, cloud.instances


@pytest.fixture(scope="module")
def drill(cluster, aws, tmp_path_factory):
    cloud, autoscaling, instances = aws
    names = []
    for i, instance in enumerate(instances):
        body = node_object(GPU_NODES, i) | node_status(GPU_NODES)
        body["spec"]["providerID"] = f"aws:///{REGION}a/{instance}"
        cluster.core.create_node(body)
        names.append(body["metadata"]["name"])
    gate_node = cluster.core.create_node(node_object(GATE_NODE, 0) | node_status(GATE_NODE)).metadata.name
    cluster.wait("the drill's nodes Ready", lambda: all(cluster._ready(n) for n in [*names, gate_node]))
    cluster.scheduler_has_seen([*names, gate_node])
    for namespace in (NAMESPACE, BURN_IN):
        cluster.core.create_namespace({"metadata": {"name": namespace}})
    pods = OperatorPods(
        cluster.api, cluster.kubeconfig, cluster.processes, tmp_path_factory.mktemp("gate"), (NAMESPACE,),
        cloud=cloud,
    )  # fmt: skip
    pods.start()
    yield cluster, autoscaling, instances, names, pods
    pods.stop()
    for namespace in (NAMESPACE, BURN_IN):
        cluster.delete_namespace(namespace)
    cluster.remove_nodes([*names, gate_node])


def device_plugin() -> list[dict]:
    """The NVIDIA device plugin's DaemonSet and its service account as its chart renders them with
    the stack's values."""
    chart = next(c for c in RELEASES.values() if c.release == "nvidia-device-plugin")
    directory = shared_dir("charts", "TRAINSTACK_CHARTS_DIR") / f"{chart.chart}-{chart.version}"
    objects = helm_template(directory, "nvidia-device-plugin", BURN_IN, nvidia_device_plugin_values())
    daemonset = [o for o in objects if o["kind"] == "DaemonSet" and o["metadata"]["name"] == chart.release]
    return [o for o in objects if o["kind"] == "ServiceAccount"] + daemonset


def install_gate(cluster) -> None:
    subject = [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    objects = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": NAME, "namespace": NAMESPACE}},
        {"apiVersion": RBAC, "kind": "ClusterRole", **cluster_role()},
        {
            "apiVersion": RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": NAME},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            "subjects": subject,
        },
        {"apiVersion": RBAC, "kind": "Role", **namespace_role(BURN_IN)},
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": {"name": NAME, "namespace": BURN_IN},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": subject,
        },
        {"apiVersion": RBAC, "kind": "Role", **events_role()},
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": {"name": NAME, "namespace": "default"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
            "subjects": subject,
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            # Its burn-in pods in the namespace kwok runs (on EKS: the training namespace, as its own).
            "spec": deployment_spec(
                BURN_IN, PREBUILT_IMAGE, [GATED], {"nodeSelector": dict(GATE_POOL)}, REGION
            ),
        },
    ]
    for obj in objects:
        cluster.objects.apply(obj)


def ended(steps: dict[str, tuple[int, str]], phase: str) -> dict:
    """The annotations support/cluster/pod-burn-in-result.yaml ends a burn-in pod by."""
    annotations = {"trainstack.test/burn-in": phase}
    for step, (code, message) in steps.items():
        annotations[f"trainstack.test/exit.{step}"] = str(code)
        annotations[f"trainstack.test/message.{step}"] = message
    return {"metadata": {"annotations": annotations}}


def passed_steps() -> dict[str, tuple[int, str]]:
    checks = [
        hc.gpu_inventory(recorded("nvidia-smi-q-x.pass.xml"), 8),
        hc.xid_scan(recorded("kmsg.pass.txt")),
        hc.nvlink_topology(recorded("topo-m.pass.txt"), 8),
    ]
    dcgm = [hc.dcgm_diagnostics(recorded("dcgmi-diag-r2.pass.json"), 2)]
    nccl = [hc.all_reduce(recorded("all_reduce_perf.pass.txt"), 354.4)]
    return {
        "checks": (0, hc.as_json(checks)),
        "dcgm": (0, ""),
        "dcgm-verdict": (0, hc.as_json(dcgm)),
        "nccl": (0, hc.as_json(nccl)),
    }


def failed_steps() -> dict[str, tuple[int, str]]:
    return {"checks": (1, hc.as_json([hc.gpu_inventory(recorded("nvidia-smi-q-x.fail-remap.xml"), 8)]))}


def taint_keys(node) -> set[str]:
    return {t.key for t in node.spec.taints or []}


def test_a_node_trains_only_once_it_passed_and_a_failed_one_is_replaced(drill):
    cluster, autoscaling, instances, names, pods = drill
    for obj in device_plugin():
        cluster.objects.apply({**obj, "metadata": {**obj["metadata"], "namespace": BURN_IN}})
    cluster.device_plugins.sync()
    cluster.wait(
        "the device plugin advertising the GPUs of the nodes in burn-in",
        lambda: all(
            (cluster.core.read_node(n).status.allocatable or {}).get(GPU_RESOURCE) == "8" for n in names
        ),
        120,
    )
    job = {
        "metadata": {"name": "trainer-0", "namespace": BURN_IN},
        "spec": {
            "nodeSelector": dict(POOL),
            "tolerations": [GPU_TOLERATION],
            "containers": [
                {"name": "t", "image": PREBUILT_IMAGE, "resources": {"limits": {GPU_RESOURCE: "8"}}}
            ],
        },
    }
    cluster.core.create_namespaced_pod(BURN_IN, job)
    install_gate(cluster)
    cluster.wait("the gate running", lambda: any(p.startswith(NAME) for p in pods.programs()), 120)

    def burn_ins():
        return {
            p.spec.node_name: p
            for p in cluster.core.list_namespaced_pod(
                BURN_IN, label_selector="app.kubernetes.io/name=trainstack-burn-in"
            ).items
        }

    cluster.wait("a burn-in pod started on each new node", lambda: {n for n, p in burn_ins().items() if p.status.pod_ip} == set(names), 120)  # fmt: skip
    pod = cluster.core.read_namespaced_pod("trainer-0", BURN_IN)
    assert pod.spec.node_name is None  # no node let in yet: the training pod waits

    found = burn_ins()
    cluster.core.patch_namespaced_pod(found[names[1]].metadata.name, BURN_IN, ended(failed_steps(), "Failed"))
    cluster.wait(
        "the failed node out",
        lambda: HEALTH_FAILED_TAINT_KEY in taint_keys(cluster.core.read_node(names[1])),
        60,
    )
    cluster.core.patch_namespaced_pod(
        found[names[0]].metadata.name, BURN_IN, ended(passed_steps(), "Succeeded")
    )
    cluster.wait(
        "the passed node let in",
        lambda: HEALTH_STARTUP_TAINT_KEY not in taint_keys(cluster.core.read_node(names[0])),
        60,
    )
    cluster.wait("the training pod bound", lambda: cluster.core.read_namespaced_pod("trainer-0", BURN_IN).spec.node_name, 60)  # fmt: skip
    assert cluster.core.read_namespaced_pod("trainer-0", BURN_IN).spec.node_name == names[0]

    good = cluster.core.read_node(names[0])
    assert good.metadata.labels[HEALTH_LABEL] == "passed"
    result = json.loads(good.metadata.annotations[HEALTH_RESULT_ANNOTATION])
    assert (result["busGbps"], result["floorGbps"], result["floorSource"]) == (478.05, 354.4, "published")
    bad = cluster.core.read_node(names[1])
    assert bad.metadata.labels[HEALTH_LABEL] == "failed"
    (taint,) = [t for t in bad.spec.taints if t.key == HEALTH_FAILED_TAINT_KEY]
    assert (taint.value, taint.effect) == ("ISOLATE", "NoExecute")
    assert HEALTH_STARTUP_TAINT_KEY not in taint_keys(bad)
    why = json.loads(bad.metadata.annotations[HEALTH_RESULT_ANNOTATION])["summary"]
    assert "row remapping failed" in why, why
    health = autoscaling.describe_auto_scaling_instances(InstanceIds=[instances[1]])["AutoScalingInstances"][
        0
    ]
    assert health["HealthStatus"].upper() == "UNHEALTHY"
    others = autoscaling.describe_auto_scaling_instances(InstanceIds=[instances[0], instances[2]])
    assert {i["HealthStatus"].upper() for i in others["AutoScalingInstances"]} == {"HEALTHY"}
    (event,) = cluster.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={names[1]},reason=TrainstackHealthFailed"
    ).items
    assert f"its Auto Scaling group gpu-gated replaces {instances[1]}" in event.message, event.message
    # The passed node's pod is gone, the failed one's kept to be read; the third still burns in.
    assert set(burn_ins()) == {names[1], names[2]}
    assert HEALTH_STARTUP_TAINT_KEY in taint_keys(cluster.core.read_node(names[2]))
    floors = cluster.core.read_namespaced_config_map("trainstack-health-floors", BURN_IN)
    assert json.loads(floors.data[GROUP]) == [478.05]
