"""The health gate's decisions (workload/trainer/health_gate.py) on nodes and pods as the API server
and the kubelet report them, and its remediation against moto's Auto Scaling: a node is burnt in
once, let in or failed by its steps' termination messages, its floor calibrated from its group's
healthy nodes, and failed nodes replaced only within the breaker. The same program on the real
controllers: tests/cluster/test_health_gate_drill.py."""

from __future__ import annotations

import json
import urllib.parse
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws
from trainer import health_gate as gate
from trainer.kube_api import EVENTS_NAMESPACE

import conventions
from components.health_gate import EVENTS_NAMESPACE as GRANTED
from components.health_gate import GatedGroup, cluster_role, events_role, namespace_role
from domain.catalog import catalog_instance

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
NAMESPACE = "training"
P5 = GatedGroup("p5", "burnIn", "p5.48xlarge", catalog_instance("p5.48xlarge"), True, 4, 2, 0.8)
GROUP = gate.Group.read(P5.settings())
GROUPS = {"p5": GROUP}


def test_the_program_and_the_stack_name_the_same_taints_labels_and_events():
    assert gate.STARTUP_TAINT_KEY == conventions.HEALTH_STARTUP_TAINT_KEY
    assert gate.FAILED_TAINT_KEY == conventions.HEALTH_FAILED_TAINT_KEY
    assert gate.MODE_LABEL == conventions.HEALTH_MODE_LABEL
    assert gate.HEALTH_LABEL == conventions.HEALTH_LABEL
    assert gate.RESULT_ANNOTATION == conventions.HEALTH_RESULT_ANNOTATION
    assert gate.NODE_GROUP_LABEL == conventions.NODE_GROUP_LABEL
    assert gate.STARTUP_TOLERATION == conventions.HEALTH_STARTUP_TOLERATION
    assert gate.GPU_TOLERATION == conventions.GPU_TOLERATION
    assert GRANTED == EVENTS_NAMESPACE == events_role()["metadata"]["namespace"]


def test_a_failed_nodes_taint_is_one_the_autoscaler_leaves_out_of_its_templates():
    """A status taint (cluster-autoscaler utils/taints/taints.go StatusTaintPrefix): dropped from a
    template made of the failed node, so the group still scales up for the pods it cannot take."""
    assert conventions.HEALTH_FAILED_TAINT_KEY.startswith(conventions.AUTOSCALER_STATUS_TAINT_PREFIX)


def test_eks_takes_the_startup_taints_key():
    """EKS's API Taint: a key of at most 63 characters, or CreateNodegroup is refused."""
    assert len(conventions.HEALTH_STARTUP_TAINT["key"]) <= 63
    assert conventions.HEALTH_STARTUP_TAINT["key"].startswith(conventions.AUTOSCALER_STARTUP_TAINT_PREFIX)


def node(name="ip-10-0-1-7.ec2.internal", gpus=8, efa=32, taints=None, labels=None, age=60, conditions=()):
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "labels": {conventions.NODE_GROUP_LABEL: "p5", **(labels or {})},
            "annotations": {},
        },
        "spec": {
            "providerID": f"aws:///us-east-1a/{INSTANCES.get(name, 'i-0none')}",
            "taints": [
                {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"},
                *(
                    taints
                    if taints is not None
                    else [{"key": gate.STARTUP_TAINT_KEY, "value": "burn-in", "effect": "NoSchedule"}]
                ),
            ],
        },
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus), "vpc.amazonaws.com/efa": str(efa)},
            "conditions": list(conditions),
        },
    }


INSTANCES: dict[str, str] = {}


class FakeKube:
    """The API server's answers the gate reads, and what it writes, kept."""

    def __init__(self, nodes, pods=()):
        self.node_list = nodes
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.configmaps: dict[str, dict] = {}
        self.events: list[tuple[str, str, str]] = []

    def nodes(self, selector):
        key, _, value = selector.partition("=")
        return [
            n
            for n in self.node_list
            if key not in n["metadata"]["labels"] or n["metadata"]["labels"][key] == value
        ]

    def pods_on(self, node):
        return [p for p in self.pods.values() if p["spec"].get("nodeName") == node]

    def get(self, path):
        name = urllib.parse.unquote(path.rsplit("/", 1)[-1])
        if path.startswith("/api/v1/nodes/"):
            return next((n for n in self.node_list if n["metadata"]["name"] == name), None)
        return (self.configmaps if "/configmaps/" in path else self.pods).get(name)

    def call(self, method, path, body=None, content_type=None):
        store = self.configmaps if "/configmaps" in path else self.pods
        if method in ("POST", "PUT"):
            body = json.loads(json.dumps(body))
            body["metadata"]["resourceVersion"] = str(int(body["metadata"].get("resourceVersion", "0")) + 1)
            store[body["metadata"]["name"]] = body
        elif method == "DELETE":
            store.pop(urllib.parse.unquote(path.rsplit("/", 1)[-1]))
        return {}

    def patch_node(self, node, operations):
        for op in operations:
            _, where, what = op["path"].split("/")
            node[where][what] = op["value"]

    def node_event(self, node, reason, message, component, kind="Warning"):
        self.events.append((node["metadata"]["name"], reason, message))


def finished(pod, phase, messages, reason=None):
    """The pod as the kubelet reports it once its init containers ended: each step's exit and
    termination message, in order, the ones after a failed step never run."""
    statuses = []
    for step, (code, message) in messages.items():
        statuses.append({"name": step, "state": {"terminated": {"exitCode": code, "message": message}}})
    pod["status"] = {
        "phase": phase,
        "initContainerStatuses": statuses,
        **({"reason": reason} if reason else {}),
    }
    return pod


CHECKS_PASS = json.dumps(
    [
        {
            "name": "gpu-inventory",
            "verdict": "pass",
            "detail": "8 GPUs",
            "severity": "MONITOR",
            "figures": {},
        },
        {"name": "xid", "verdict": "pass", "detail": "none", "severity": "MONITOR", "figures": {}},
    ]
)
DCGM_PASS = json.dumps([{"name": "dcgm", "verdict": "pass", "detail": "level 2", "severity": "MONITOR"}])


def nccl(gbps, ok=True):
    """trainer.burn_in nccl's message: its one check, as hc.all_reduce judged all_reduce_perf."""
    detail = (
        f"{gbps} GB/s bus bandwidth"
        if ok
        else f"all-reduce bus bandwidth {gbps} GB/s is below the group's floor"
    )
    check = {"name": "nccl", "verdict": "pass" if ok else "fail", "detail": detail}
    return json.dumps([{**check, "severity": "MONITOR" if ok else "RESET", "figures": {"busGbps": gbps}}])


def the_gate(kube, instances=None):
    return gate.Gate(kube, instances, GROUPS, NAMESPACE, "training:1", "dcgm:4.5.3", "floors", 0.2)


def test_a_new_node_gets_one_burn_in_pod_with_its_groups_steps_and_floor():
    kube = FakeKube([node()])
    said = the_gate(kube).round("trainstack.dev/role=gpu", NOW)
    assert said == [
        "node ip-10-0-1-7.ec2.internal: burn-in started (DCGM level 2, all-reduce floor 354.4: published)"
    ]
    (pod,) = kube.pods.values()
    spec = pod["spec"]
    assert spec["nodeName"] == "ip-10-0-1-7.ec2.internal" and spec["restartPolicy"] == "Never"
    assert [c["name"] for c in spec["initContainers"]] == ["checks", "dcgm", "dcgm-verdict", "nccl"]
    checks, dcgm, _, allreduce = spec["initContainers"]
    assert checks["command"][3:] == ["checks", "--gpus", "8", "--efa", "32", "--nvlink"]
    assert checks["resources"]["limits"] == {
        "memory": "64Gi",
        "nvidia.com/gpu": "8",
        "vpc.amazonaws.com/efa": "32",
    }
    assert "dcgmi diag -r 2 -j --host" in dcgm["command"][-1]
    assert allreduce["command"] == [
        "python",
        "-m",
        "trainer.burn_in",
        "nccl",
        "--gpus",
        "8",
        "--floor",
        "354.4",
    ]
    assert conventions.HEALTH_STARTUP_TOLERATION in spec["tolerations"]
    # A second round while it runs starts nothing more.
    assert the_gate(kube).round("trainstack.dev/role=gpu", NOW) == []
    assert len(kube.pods) == 1


def test_a_node_whose_devices_are_not_advertised_yet_waits_then_fails():
    kube = FakeKube([node(gpus=0, age=60)])
    assert "waiting for its device plugins (0/8 GPUs" in the_gate(kube).round("r", NOW)[0]
    assert kube.pods == {}
    late = node(gpus=0, age=gate.DEVICE_WAIT_SECONDS + 1)
    kube = FakeKube([late])
    said = the_gate(kube).round("r", NOW)
    assert "advertise 0 of 8 GPUs" in said[0]
    assert {"key": gate.FAILED_TAINT_KEY, "value": "REBOOT", "effect": "NoExecute"} in late["spec"]["taints"]


def test_a_passed_node_is_let_in_and_its_figure_calibrates_its_group():
    n = node(efa=0)
    kube = FakeKube([n])
    alone = {"p5": gate.Group.read({**P5.settings(), "efa": 0})}  # no EFA: no two-node test
    gate.Gate(kube, None, alone, NAMESPACE, "training:1", "dcgm:4.5.3", "floors", 0.2).round("r", NOW)
    (pod,) = kube.pods.values()
    finished(
        pod,
        "Succeeded",
        {
            "checks": (0, CHECKS_PASS),
            "dcgm": (0, ""),
            "dcgm-verdict": (0, DCGM_PASS),
            "nccl": (0, nccl(471.2)),
        },
    )
    said = gate.Gate(kube, None, alone, NAMESPACE, "training:1", "dcgm:4.5.3", "floors", 0.2).round("r", NOW)
    assert said == ["node ip-10-0-1-7.ec2.internal passed: passed"]
    assert [t["key"] for t in n["spec"]["taints"]] == ["nvidia.com/gpu"]
    assert n["metadata"]["labels"][gate.HEALTH_LABEL] == "passed"
    result = json.loads(n["metadata"]["annotations"][gate.RESULT_ANNOTATION])
    assert (
        result["busGbps"] == 471.2 and result["floorGbps"] == 354.4 and result["floorSource"] == "published"
    )
    assert kube.pods == {}  # its pod goes; a failed one stays to be read
    assert json.loads(kube.configmaps["floors"]["data"]["p5"]) == [471.2]


def test_the_floor_is_the_groups_own_once_three_nodes_passed():
    assert gate.floor([], GROUP) == (354.4, "published")
    assert gate.floor([460.0, 480.0], GROUP) == (354.4, "published")
    assert gate.floor([460.0, 480.0, 400.0], GROUP) == (368.0, "calibrated on 3 nodes")
    unknown = gate.Group.read({**P5.settings(), "publishedBusGbps": None})
    assert gate.floor([], unknown) == (None, "none yet")
    assert gate.calibrated(list(range(16)), 99.0) == [*range(1, 16), 99.0]


def test_a_failed_step_taints_the_node_and_its_group_replaces_it():
    with mock_aws():
        autoscaling, instance = auto_scaling_group(nodes=4)
        n = node(name="ip-10-0-1-9.ec2.internal")
        INSTANCES[n["metadata"]["name"]] = instance
        n["spec"]["providerID"] = f"aws:///us-east-1a/{instance}"
        kube = FakeKube([n])
        the_gate(kube, gate.Instances(boto3.session.Session(region_name="us-east-1"))).round("r", NOW)
        (pod,) = kube.pods.values()
        bad = json.dumps(
            [
                {
                    "name": "gpu-inventory",
                    "verdict": "fail",
                    "detail": "7 GPUs seen by the driver, 8 expected",
                    "severity": "REBOOT",
                }
            ]
        )
        finished(pod, "Failed", {"checks": (1, bad)})
        said = the_gate(kube, gate.Instances(boto3.session.Session(region_name="us-east-1"))).round("r", NOW)
        assert "unhealthy (REBOOT): gpu-inventory: 7 GPUs seen by the driver" in said[0]
        assert "its Auto Scaling group gpu-p5 replaces" in said[0]
        assert n["spec"]["taints"][-1] == {
            "key": gate.FAILED_TAINT_KEY,
            "value": "REBOOT",
            "effect": "NoExecute",
        }
        assert gate.STARTUP_TAINT_KEY not in [t["key"] for t in n["spec"]["taints"]]
        assert n["metadata"]["labels"][gate.HEALTH_LABEL] == "failed"
        health = autoscaling.describe_auto_scaling_instances(InstanceIds=[instance])["AutoScalingInstances"][
            0
        ]
        assert health["HealthStatus"].upper() == "UNHEALTHY"
        assert kube.events[-1][1] == "TrainstackHealthFailed"
        assert pod["metadata"]["name"] in kube.pods  # kept: its logs say what failed


def auto_scaling_group(nodes: int):
    ec2 = boto3.client("ec2", region_name="us-east-1")
    autoscaling = boto3.client("autoscaling", region_name="us-east-1")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    ec2.create_launch_template(LaunchTemplateName="gpu-p5", LaunchTemplateData={"ImageId": image})
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="gpu-p5",
        LaunchTemplate={"LaunchTemplateName": "gpu-p5"},
        MinSize=0,
        MaxSize=nodes,
        DesiredCapacity=nodes,
        AvailabilityZones=["us-east-1a"],
    )
    group = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=["gpu-p5"])["AutoScalingGroups"][0]
    return autoscaling, group["Instances"][0]["InstanceId"]


def test_past_the_breaker_a_failed_node_is_tainted_but_not_replaced():
    class Refuses:
        def replace(self, instance):
            raise AssertionError("replaced past the breaker")

    failing = node(name="a", taints=[{"key": gate.FAILED_TAINT_KEY, "value": "RESET", "effect": "NoExecute"}])
    failing["metadata"]["labels"][gate.HEALTH_LABEL] = "failed"
    n = node(name="b")
    kube = FakeKube([failing, n])
    the_gate(kube, Refuses()).round("r", NOW)
    finished(
        kube.pods[gate.pod_name("b")],
        "Failed",
        {
            "checks": (
                1,
                json.dumps([{"name": "xid", "verdict": "fail", "detail": "Xid 79", "severity": "REBOOT"}]),
            )
        },
    )
    said = the_gate(kube, Refuses()).round("r", NOW)
    assert "not replaced: 2 of the group's 4 nodes are failing, past the breaker (1)" in said[0]
    assert n["metadata"]["labels"][gate.HEALTH_LABEL] == "failed"


@pytest.mark.parametrize(
    ("failing", "nodes", "allowed"),
    [(1, 1, True), (1, 4, True), (2, 4, False), (2, 10, True), (3, 10, False)],
)
def test_the_breaker_allows_a_fifth_of_a_group_at_least_one(failing, nodes, allowed):
    group = gate.Group.read({**P5.settings(), "nodes": nodes})
    assert gate.may_remediate(failing, group, 0.2) is allowed


def test_a_burn_in_past_its_deadline_fails_the_node_on_the_step_it_was_in():
    pod = finished(
        {"metadata": {"name": "x"}},
        "Failed",
        {"checks": (0, CHECKS_PASS)},
        reason="DeadlineExceeded",
    )
    verdict = gate.verdict_of(pod)
    assert not verdict.passed and verdict.severity == "REBOOT"
    assert verdict.summary == "dcgm: the burn-in did not finish (DeadlineExceeded)"


def test_an_all_reduce_under_its_floor_fails_the_node():
    pod = finished(
        {"metadata": {"name": "x"}},
        "Failed",
        {
            "checks": (0, CHECKS_PASS),
            "dcgm": (0, ""),
            "dcgm-verdict": (0, DCGM_PASS),
            "nccl": (1, nccl(201.5, ok=False)),
        },
    )
    verdict = gate.verdict_of(pod)
    assert (verdict.passed, verdict.severity, verdict.bus_gbps) == (False, "RESET", 201.5)
    assert "201.5 GB/s is below the group's floor" in verdict.summary


def test_a_running_burn_in_has_no_verdict():
    assert gate.verdict_of({"metadata": {"name": "x"}, "status": {"phase": "Pending"}}) is None


def test_a_node_that_trained_before_its_group_was_gated_is_let_in_untouched():
    """EKS puts a node group's new taint on its running nodes: they are not emptied for a burn-in."""
    n = node()
    job = {
        "metadata": {"name": "trainer-0", "labels": {}},
        "spec": {
            "nodeName": n["metadata"]["name"],
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}],
        },
        "status": {"phase": "Running"},
    }
    kube = FakeKube([n], [job])
    said = the_gate(kube).round("r", NOW)
    assert said == ["node ip-10-0-1-7.ec2.internal: already training (trainer-0), let in without a burn-in"]
    assert n["metadata"]["labels"][gate.HEALTH_LABEL] == "passed"
    assert set(kube.pods) == {"trainer-0"}


def test_a_faulty_gpu_while_training_takes_the_node_out_at_once():
    """The node monitoring agent's condition: an Xid it treats as fatal."""
    n = node(
        taints=[],
        labels={gate.HEALTH_LABEL: "passed"},
        conditions=[
            {
                "type": "AcceleratedHardwareReady",
                "status": "False",
                "reason": "NvidiaXID79Error",
                "message": "GPU has fallen off the bus",
            }
        ],
    )
    kube = FakeKube([n])
    said = the_gate(kube).round("r", NOW)
    assert "unhealthy (REBOOT): NvidiaXID79Error: GPU has fallen off the bus" in said[0]
    assert "EKS node repair replaces or reboots it" in said[0]
    assert n["spec"]["taints"][-1] == {"key": gate.FAILED_TAINT_KEY, "value": "REBOOT", "effect": "NoExecute"}
    assert the_gate(kube).round("r", NOW) == []  # once


def test_a_passive_groups_node_is_watched_not_burnt_in():
    passive = {"p5": gate.Group.read({**P5.settings(), "mode": "passive"})}
    n = node(taints=[])
    kube = FakeKube([n])
    assert gate.Gate(kube, None, passive, NAMESPACE, "i", "d", "floors", 0.2).round("r", NOW) == []
    assert kube.pods == {}


def test_the_gates_rights_are_what_it_does():
    verbs = {(r["resources"][0], v) for r in cluster_role()["rules"] for v in r["verbs"]}
    assert verbs == {("nodes", "get"), ("nodes", "list"), ("nodes", "patch"), ("pods", "list")}
    own = {(r["resources"][0], v) for r in namespace_role(NAMESPACE)["rules"] for v in r["verbs"]}
    assert own == {
        ("pods", "get"),
        ("pods", "create"),
        ("pods", "delete"),
        ("configmaps", "get"),
        ("configmaps", "create"),
        ("configmaps", "update"),
    }


def passed_alone(kube, n):
    """A node's own burn-in, ended passed."""
    (pod,) = [p for p in kube.pods.values() if p["spec"]["nodeName"] == n["metadata"]["name"]]
    messages = {
        "checks": (0, CHECKS_PASS),
        "dcgm": (0, ""),
        "dcgm-verdict": (0, DCGM_PASS),
        "nccl": (0, nccl(471.2)),
    }
    finished(pod, "Succeeded", messages)


def pair_report(ok: bool, gbps: float) -> str:
    """trainer.preflight's report (--termination-json), as rank 0 of the pair writes it."""
    problems = [] if ok else [f"all-reduce bus bandwidth {gbps} GB/s is below the floor of 354.4 GB/s"]
    return json.dumps(
        {"ok": ok, "bus_bandwidth_gbps": gbps, "network": "AWS Libfabric", "problems": problems}
    )


def two_fresh_nodes():
    a, b = node(name="a"), node(name="b")
    kube = FakeKube([a, b])
    the_gate(kube).round("r", NOW)
    for n in (a, b):
        passed_alone(kube, n)
    said = the_gate(kube).round("r", NOW)
    return kube, a, b, said


def test_two_fresh_efa_nodes_run_an_all_reduce_together_before_they_train():
    kube, a, b, said = two_fresh_nodes()
    assert said[:2] == [
        f"node {n} passed its own steps; waiting up to 180 s for a fresh partner" for n in "ab"
    ]
    assert said[2] == "nodes a and b: two-node all-reduce started (floor 354.4: published)"
    assert all(gate.STARTUP_TAINT_KEY in [t["key"] for t in n["spec"]["taints"]] for n in (a, b))  # still out
    (first,) = kube.pods.values()
    spec = first["spec"]["containers"][0]
    assert (
        first["spec"]["nodeName"] == "a"
        and first["metadata"]["annotations"][gate.PAIR_PARTNER_ANNOTATION] == "b"
    )
    assert spec["command"][:12] == [
        "torchrun", "--nnodes", "2", "--nproc-per-node", "gpu", "--node-rank", "0",
        "--master-addr", "$(POD_IP)", "--master-port", "29500", "-m",
    ]  # fmt: skip
    assert spec["resources"]["limits"]["vpc.amazonaws.com/efa"] == "32"
    assert {"name": "FI_PROVIDER", "value": "efa"} in spec["env"]
    # Rank 1 joins once rank 0 has its address.
    assert the_gate(kube).round("r", NOW) == [] and len(kube.pods) == 1
    first["status"] = {"phase": "Running", "podIP": "10.0.1.99"}
    the_gate(kube).round("r", NOW)
    second = kube.pods[gate.pair_pod_name("b")]
    command = second["spec"]["containers"][0]["command"]
    assert second["spec"]["nodeName"] == "b" and command[6] == "1" and command[8] == "10.0.1.99"
    # Both end: both let in, the pair's figure calibrates the group's two-node floor.
    first["status"] = {
        "phase": "Succeeded",
        "containerStatuses": [
            {"name": "pair", "state": {"terminated": {"exitCode": 0, "message": pair_report(True, 452.3)}}}
        ],
    }
    second["status"] = {"phase": "Succeeded"}
    said = the_gate(kube).round("r", NOW)
    assert said == [f"node {n} passed: two-node all-reduce 452.3 GB/s over AWS Libfabric" for n in "ab"]
    assert all(n["metadata"]["labels"][gate.HEALTH_LABEL] == "passed" for n in (a, b))
    assert all(gate.STARTUP_TAINT_KEY not in [t["key"] for t in n["spec"]["taints"]] for n in (a, b))
    assert json.loads(kube.configmaps["floors"]["data"]["p5.pair"]) == [452.3]
    assert kube.pods == {}


def test_a_failed_pair_fails_both_nodes_it_cannot_tell_apart():
    kube, a, b, _ = two_fresh_nodes()
    first = kube.pods[gate.pair_pod_name("a")]
    first["status"] = {"phase": "Running", "podIP": "10.0.1.99"}
    the_gate(kube).round("r", NOW)
    first["status"] = {
        "phase": "Failed",
        "containerStatuses": [
            {"name": "pair", "state": {"terminated": {"exitCode": 4, "message": pair_report(False, 201.0)}}}
        ],
    }
    kube.pods[gate.pair_pod_name("b")]["status"] = {"phase": "Failed"}
    said = the_gate(kube).round("r", NOW)
    assert [line.split(" unhealthy")[0] for line in said] == ["node a", "node b"]
    assert "two-node all-reduce: all-reduce bus bandwidth 201.0 GB/s is below the floor" in said[0]
    assert all(n["metadata"]["labels"][gate.HEALTH_LABEL] == "failed" for n in (a, b))
    # The second is past the breaker (2 of 4 failing, one allowed): tainted, not replaced.
    assert "not replaced: 2 of the group's 4 nodes are failing" in said[1]


def test_a_node_without_a_fresh_partner_is_let_in_alone_after_its_wait():
    a = node(name="a")
    kube = FakeKube([a])
    the_gate(kube).round("r", NOW)
    passed_alone(kube, a)
    the_gate(kube).round("r", NOW)
    assert the_gate(kube).round("r", NOW + timedelta(seconds=gate.PAIR_WAIT_SECONDS - 1)) == []
    said = the_gate(kube).round("r", NOW + timedelta(seconds=gate.PAIR_WAIT_SECONDS))
    assert said == ["node a passed its own steps; no fresh partner joined within 180 s for the two-node test"]
    assert a["metadata"]["labels"][gate.HEALTH_LABEL] == "passed"
    assert gate.STARTUP_TAINT_KEY not in [t["key"] for t in a["spec"]["taints"]]


def test_the_burn_in_pods_reach_each_other_past_the_namespaces_default_deny():
    from components.health_gate import PAIR_POLICY

    selector = {"app.kubernetes.io/name": gate.POD_NAME}
    assert PAIR_POLICY["podSelector"]["matchLabels"] == selector
    assert PAIR_POLICY["ingress"] == [{"from": [{"podSelector": {"matchLabels": selector}}]}]


def test_a_node_the_breaker_held_is_replaced_once_fewer_of_its_group_are_failing():
    with mock_aws():
        autoscaling, instance = auto_scaling_group(nodes=4)
        other = node(
            name="a", taints=[{"key": gate.FAILED_TAINT_KEY, "value": "RESET", "effect": "NoExecute"}]
        )
        other["metadata"]["labels"][gate.HEALTH_LABEL] = "failed"
        held = node(
            name="b", taints=[{"key": gate.FAILED_TAINT_KEY, "value": "REBOOT", "effect": "NoExecute"}]
        )
        held["metadata"]["labels"][gate.HEALTH_LABEL] = "failed"
        held["metadata"]["annotations"][gate.REMEDY_ANNOTATION] = "held"
        held["spec"]["providerID"] = f"aws:///us-east-1a/{instance}"
        instances = gate.Instances(boto3.session.Session(region_name="us-east-1"))
        kube = FakeKube([other, held])
        assert the_gate(kube, instances).round("r", NOW) == []  # 2 of 4 failing: still held
        kube.node_list.remove(other)  # its replacement took it away
        (said,) = the_gate(kube, instances).round("r", NOW)
        assert said == f"node b: its Auto Scaling group gpu-p5 replaces {instance}"
        assert held["metadata"]["annotations"][gate.REMEDY_ANNOTATION] == "asked"
        health = autoscaling.describe_auto_scaling_instances(InstanceIds=[instance])["AutoScalingInstances"][
            0
        ]
        assert health["HealthStatus"].upper() == "UNHEALTHY"
        assert the_gate(kube, instances).round("r", NOW) == []  # asked once


def test_a_node_node_repair_rebooted_healthy_is_let_back_in():
    faulty = {
        "type": "AcceleratedHardwareReady",
        "status": "False",
        "reason": "NvidiaXID79Error",
        "message": "",
    }
    n = node(taints=[], labels={gate.HEALTH_LABEL: "passed"}, conditions=[faulty])
    kube = FakeKube([n])
    the_gate(kube).round("r", NOW)
    assert n["metadata"]["annotations"][gate.REMEDY_ANNOTATION] == "repair"
    n["status"]["conditions"] = [{**faulty, "status": "True", "reason": "AcceleratedHardwareIsReady"}]
    (said,) = the_gate(kube).round("r", NOW)
    assert said.endswith("let back in: the node monitoring agent reports its GPUs healthy again")
    assert gate.FAILED_TAINT_KEY not in [t["key"] for t in n["spec"]["taints"]]
    assert n["metadata"]["labels"][gate.HEALTH_LABEL] == "passed"


def test_a_pair_whose_first_pod_ends_before_its_partner_ran_fails_only_the_first():
    kube, a, b, _ = two_fresh_nodes()
    kube.pods[gate.pair_pod_name("a")]["status"] = {"phase": "Failed", "reason": "UnexpectedAdmissionError"}
    (said,) = the_gate(kube).round("r", NOW)
    assert said.startswith("node a unhealthy (RESET): two-node all-reduce:")
    assert a["metadata"]["labels"][gate.HEALTH_LABEL] == "failed"
    assert gate.HEALTH_LABEL not in b["metadata"]["labels"]  # b never ran: it waits for another partner


def test_a_second_whose_partner_left_is_freed_to_pair_again():
    kube, a, _, _ = two_fresh_nodes()
    kube.pods[gate.pair_pod_name("a")]["status"] = {"phase": "Running", "podIP": "10.0.1.99"}
    the_gate(kube).round("r", NOW)
    assert gate.pair_pod_name("b") in kube.pods
    kube.node_list.remove(a)  # scaled in, or deleted, while the pair ran
    the_gate(kube).round("r", NOW)
    assert gate.pair_pod_name("b") not in kube.pods
    said = the_gate(kube).round("r", NOW + timedelta(seconds=gate.PAIR_WAIT_SECONDS))
    assert said == ["node b passed its own steps; no fresh partner joined within 180 s for the two-node test"]
