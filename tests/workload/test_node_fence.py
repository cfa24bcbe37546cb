"""The hung-node fence's rules (workload/trainer/node_fence.py) on nodes and pods as the API server
answers them, and its AWS half against moto: which node is hung, the breaker, and the order of a
fence (the instance replaced by its group, the taint only once EC2 reports it down). The whole drill,
with the real controllers, is tests/cluster/test_hung_node.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws
from trainer.kube_api import EVENTS_NAMESPACE
from trainer.node_fence import (
    OUT_OF_SERVICE,
    Hung,
    Instances,
    Policy,
    fence,
    hung_nodes,
)

from components.node_fence import EVENTS_NAMESPACE as GRANTED
from components.node_fence import events_role

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
POLICY = Policy(after_seconds=180, max_share=0.2)


def node(
    name: str, ready: bool = True, since_seconds: float = 0, instance: str | None = "i-0abc", taints=()
) -> dict:
    when = (NOW - timedelta(seconds=since_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "7"},
        "spec": {
            **({"providerID": f"aws:///us-east-1a/{instance}"} if instance else {}),
            "taints": list(taints),
        },
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "Unknown", "lastTransitionTime": when}
            ]
        },
    }


def pod(name: str, on: str, terminating: bool = True) -> dict:
    meta = {"name": name, "namespace": "training"}
    if terminating:
        meta["deletionTimestamp"] = "2026-11-29T11:58:00Z"
    return {"metadata": meta, "spec": {"nodeName": on}}


def test_a_node_not_ready_past_the_bound_with_a_pod_stuck_terminating_is_hung():
    nodes = [node("a", ready=False, since_seconds=200, instance="i-0aaa")] + [node(f"n{i}") for i in range(9)]
    found, held = hung_nodes(nodes, [pod("llama-node-0-0-x", "a")], NOW, POLICY)
    assert held is None
    assert found == [Hung("a", "i-0aaa", 200.0, ("training/llama-node-0-0-x",))]


@pytest.mark.parametrize(
    "case, victim, pods",
    [
        ("not down long enough", node("a", ready=False, since_seconds=170), [pod("p", "a")]),
        ("nothing stuck on it: node repair's", node("a", ready=False, since_seconds=900), []),
        (
            "its pod not terminating",
            node("a", ready=False, since_seconds=900),
            [pod("p", "a", terminating=False)],
        ),
        ("Ready again", node("a", ready=True, since_seconds=900), [pod("p", "a")]),
        (
            "fenced already",
            node(
                "a", ready=False, since_seconds=900, taints=[{"key": OUT_OF_SERVICE, "effect": "NoExecute"}]
            ),
            [pod("p", "a")],
        ),
        ("a stuck pod on another node", node("a", ready=False, since_seconds=900), [pod("p", "n1")]),
    ],
)
def test_what_is_not_fenced(case, victim, pods):
    nodes = [victim] + [node(f"n{i}") for i in range(9)]
    assert hung_nodes(nodes, pods, NOW, POLICY) == ([], None), case


def test_past_its_share_of_the_gpu_nodes_down_at_once_the_breaker_fences_none_and_says_why():
    down = [node(f"d{i}", ready=False, since_seconds=900) for i in range(3)]
    nodes = down + [node(f"n{i}") for i in range(7)]
    found, held = hung_nodes(nodes, [pod(f"p{i}", f"d{i}") for i in range(3)], NOW, POLICY)
    assert found == []
    assert held.startswith("3 of 10 GPU nodes are not Ready (the most fenced at once is 2)"), held
    # At the share, each is fenced; and a group too small for a share still fences one node.
    found, held = hung_nodes(
        down[:2] + nodes[3:] + [node("n7")], [pod(f"p{i}", f"d{i}") for i in range(2)], NOW, POLICY
    )
    assert [h.node for h in found] == ["d0", "d1"] and held is None
    found, _ = hung_nodes([down[0], node("n0")], [pod("p0", "d0")], NOW, POLICY)
    assert [h.node for h in found] == ["d0"]


class Cluster:
    """What the fence asks of the API server, recorded."""

    def __init__(self):
        self.taints: list[tuple[str, str]] = []
        self.events: list[str] = []

    def taint(self, node: dict, why: str) -> None:
        self.taints.append((node["metadata"]["name"], why))

    def event(self, node: dict, message: str) -> None:
        self.events.append(message)


@pytest.fixture
def group():
    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        image = ec2.describe_images()["Images"][0]["ImageId"]
        ec2.create_launch_template(
            LaunchTemplateName="gpu", LaunchTemplateData={"ImageId": image, "InstanceType": "p5.48xlarge"}
        )
        autoscaling = boto3.client("autoscaling", region_name="us-east-1")
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName="eks-gpu-p5",
            LaunchTemplate={"LaunchTemplateName": "gpu"},
            MinSize=2,
            MaxSize=2,
            DesiredCapacity=2,
            AvailabilityZones=["us-east-1a"],
        )
        (asg,) = autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
        yield ec2, autoscaling, [i["InstanceId"] for i in asg["Instances"]]


def test_a_fence_replaces_the_instance_through_its_group_then_taints_the_node(group):
    ec2, autoscaling, (victim, other) = group
    cluster = Cluster()
    hung = Hung("ip-10-0-1-5", victim, 240.0, ("training/llama-node-0-0-x",))
    said = fence(
        cluster, Instances(boto3.session.Session(region_name="us-east-1")), node("ip-10-0-1-5"), hung
    )
    state = ec2.describe_instances(InstanceIds=[victim])["Reservations"][0]["Instances"][0]["State"]["Name"]
    assert state == "terminated"
    (asg,) = autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"]
    assert asg["DesiredCapacity"] == 2 and other in {i["InstanceId"] for i in asg["Instances"]}
    assert len(asg["Instances"]) == 2  # its replacement
    ((name, why),) = cluster.taints
    assert name == "ip-10-0-1-5"
    assert why == (
        f"not Ready 240 s with 1 pod(s) stuck Terminating (training/llama-node-0-0-x); instance {victim} terminated"
    )
    assert cluster.events == [f"fenced: {why}; pod GC deletes its pods and their jobs restart on other nodes"]
    assert said.startswith("node ip-10-0-1-5 fenced: ")


class Booting(Instances):
    """EC2 still reporting the instance running after the group took it: the taint waits."""

    def state(self, instance: str) -> str:
        return "running"


def test_no_taint_while_ec2_still_reports_the_instance_running(group):
    _, _, (victim, _) = group
    cluster = Cluster()
    hung = Hung("n", victim, 240.0, ("training/p",))
    said = fence(cluster, Booting(boto3.session.Session(region_name="us-east-1")), node("n"), hung)
    assert cluster.taints == [] and cluster.events == []
    assert said == f"node n: eks-gpu-p5 is replacing {victim} (now running); tainted once it is down"


def test_a_node_outside_any_auto_scaling_group_is_named_and_left_alone(group):
    ec2, _, _ = group
    image = ec2.describe_images()["Images"][0]["ImageId"]
    (alone,) = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"]
    cluster = Cluster()
    hung = Hung("n", alone["InstanceId"], 240.0, ("training/p",))
    said = fence(cluster, Instances(boto3.session.Session(region_name="us-east-1")), node("n"), hung)
    assert cluster.taints == []
    assert said.startswith(
        f"node n ({alone['InstanceId']}) is hung but in no Auto Scaling group: left to its owner"
    )
    state = ec2.describe_instances(InstanceIds=[alone["InstanceId"]])["Reservations"][0]["Instances"][0][
        "State"
    ]
    assert state["Name"] == "running"


def test_an_instance_ec2_no_longer_knows_is_down(group):
    cluster = Cluster()
    hung = Hung("n", "i-0123456789abcdef0", 240.0, ("training/p",))
    fence(cluster, Instances(boto3.session.Session(region_name="us-east-1")), node("n"), hung)
    assert [name for name, _ in cluster.taints] == ["n"]


def test_the_component_grants_events_where_the_program_writes_them():
    assert GRANTED == EVENTS_NAMESPACE == events_role()["metadata"]["namespace"]


class Draining(Instances):
    """The group already terminating the instance (an EKS managed group's hook draining the node):
    not asked again, and no taint while EC2 still reports it running."""

    def __init__(self):
        self.replaced: list[str] = []

    def group_of(self, instance: str):
        return ("eks-gpu-p5", "Terminating:Wait")

    def state(self, instance: str) -> str:
        return "running"

    def replace(self, instance: str) -> None:
        self.replaced.append(instance)


def test_an_instance_its_group_is_already_terminating_is_not_asked_again():
    cluster, instances = Cluster(), Draining()
    said = fence(cluster, instances, node("n"), Hung("n", "i-0abc", 240.0, ("training/p",)))
    assert instances.replaced == [] and cluster.taints == []
    assert said == "node n: eks-gpu-p5 is replacing i-0abc (now running); tainted once it is down"
