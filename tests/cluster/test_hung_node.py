"""A GPU node hangs under a running TrainJob's gang: the stack's fence (components/node_fence.py, its
program workload/trainer/node_fence.py) has the gang running again on the other nodes within its
bound, where without it the gang waits for node repair (30 minutes on EKS).

Everything that decides it is the real program: the JobSet Trainer builds from the stack's
ClusterTrainingRuntime (components/jobs/training_runtime.py) run by the real JobSet and Job
controllers; the node lifecycle controller, taint-based eviction and pod GC of the real
kube-controller-manager; the fence's Deployment, service account and RBAC as the component renders
them, its pod run as the fence's program (support/cluster/pods.py) with the credentials the API
server issues for that service account. AWS is moto's server: an Auto Scaling group whose instances
are the nodes' `providerID`s.

The hang is a frozen kubelet: the node to hang is managed by a kwok process of its own, stopped with
SIGSTOP. Its lease is not renewed, so the node lifecycle controller marks it not Ready after its
grace period (50 s) and evicts its pods after their toleration (60 s: components/jobs/pods.py
NODE_LOSS_TOLERATIONS); no kubelet confirms their end, so they stay Terminating and the gang's Job
with them, until the fence has the instance replaced and taints the node out-of-service."""

from __future__ import annotations

import signal

import pytest
from support.cluster.cloud import REGION, auto_scaling_group
from support.cluster.harness import CLUSTER_GROUP
from support.cluster.kwok import KWOK_ANNOTATION, node_object, node_status, start_kwok
from support.cluster.pods import OperatorPods
from support.cluster.stacks import PREBUILT_IMAGE

from components.jobs.pods import Checkpoints
from components.jobs.training_runtime import RuntimeArgs, job_set_spec, runtime_spec
from components.node_fence import NAME, cluster_role, deployment_spec, events_role
from conventions import GPU_NODE_LABEL
from domain.placement import system_placement
from offline.nodes import Node

pytestmark = CLUSTER_GROUP

NAMESPACE = "hung-node"
POOL = {"trainstack.test/pool": "hung-node"}
GPU_NODES = Node(
    group="hung-node",
    instance_type=None,
    max_nodes=3,
    labels={**POOL, **GPU_NODE_LABEL},
    taints=[],
    allocatable={"cpu": 4000, "memory": 16},
)
FENCE_POOL = {"trainstack.test/pool": "node-fence"}
FENCE_NODE = Node(
    group="node-fence",
    instance_type=None,
    max_nodes=1,
    labels=FENCE_POOL,
    taints=[],
    allocatable={"cpu": 4000, "memory": 16},
)
VICTIM_KWOK = "hangs"  # the annotation value the victim node's own kwok manages
AFTER_SECONDS = 30  # the fence's bound in this drill (the stack's default is 180)
# From the hang: the lifecycle controller's grace (50 s), the pods' toleration (60 s), the fence's
# bound and round (15 s), pod GC's period (20 s), the gang's restart; with margin.
WITHIN_SECONDS = 480
RUNTIME = runtime_spec(
    RuntimeArgs(system_placement("m6i.large", 2, 8, None, POOL), Checkpoints(), None, None, None)
)
GANG = 2
KEEPS_RUNNING = "trainstack.test/keeps-running"  # support/cluster/pod-keeps-running.yaml
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
JOBSET = "jobset.x-k8s.io/v1alpha2"


@pytest.fixture(scope="module")
def aws():
    """moto's server, with one Auto Scaling group of three instances: the GPU nodes'."""
    with auto_scaling_group("gpu-p5", 3, 3) as cloud:
        yield cloud.env, cloud.ec2, cloud.instances


@pytest.fixture(scope="module")
def drill(cluster, operators, aws, tmp_path_factory):
    cloud, ec2, instances = aws
    victim_kwok = start_kwok(cluster.processes, cluster.kubeconfig, manages=VICTIM_KWOK, name="kwok-victim")
    names = []
    for i, instance in enumerate(instances):
        body = node_object(GPU_NODES, i) | node_status(GPU_NODES)
        body["spec"]["providerID"] = f"aws:///{REGION}a/{instance}"
        if i == 0:
            body["metadata"]["annotations"][KWOK_ANNOTATION] = VICTIM_KWOK
        cluster.core.create_node(body)
        names.append(body["metadata"]["name"])
    names += [cluster.core.create_node(node_object(FENCE_NODE, 0) | node_status(FENCE_NODE)).metadata.name]
    cluster.wait("the drill's nodes Ready", lambda: all(cluster._ready(n) for n in names))
    cluster.scheduler_has_seen(names)
    cluster.core.create_namespace({"metadata": {"name": NAMESPACE}})
    pods = OperatorPods(
        cluster.api, cluster.kubeconfig, cluster.processes, tmp_path_factory.mktemp("fence"), (NAMESPACE,),
        cloud=cloud,
    )  # fmt: skip
    pods.start()
    yield cluster, ec2, instances, names, victim_kwok, pods
    pods.stop()
    victim_kwok.send_signal(signal.SIGCONT)
    victim_kwok.terminate()
    cluster.delete_namespace(NAMESPACE)
    cluster.remove_nodes(names)


def install_fence(cluster) -> None:
    """The fence as the component renders it, in the drill's namespace."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
    }
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", **cluster_role()}
    subject = [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": NAME},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
        "subjects": subject,
    }
    events = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", **events_role()}
    events_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": NAME, "namespace": "default"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": NAME},
        "subjects": subject,
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE},
        "spec": deployment_spec(PREBUILT_IMAGE, AFTER_SECONDS, {"nodeSelector": dict(FENCE_POOL)}),
    }
    for obj in (account, role, binding, events, events_binding, deployment):
        cluster.objects.apply(obj)


def gang_pods(cluster) -> list:
    return cluster.core.list_namespaced_pod(
        NAMESPACE, label_selector="jobset.sigs.k8s.io/jobset-name=gang"
    ).items


def test_a_hung_node_is_fenced_and_the_gang_runs_again_on_the_other_nodes(drill):
    cluster, ec2, instances, names, victim_kwok, pods = drill
    install_fence(cluster)
    cluster.wait("the fence running", lambda: any(p.startswith(NAME) for p in pods.programs()), 120)
    train_job = {
        "metadata": {"name": "gang"},
        "spec": {"trainer": {"numNodes": GANG, "image": PREBUILT_IMAGE}},
    }
    spec = job_set_spec(train_job, {"spec": RUNTIME})
    (replicated,) = spec["replicatedJobs"]
    replicated["template"]["spec"]["template"]["metadata"] = {"annotations": {KEEPS_RUNNING: "true"}}
    # The victim first: the gang's first run has a pod on it.
    for other in names[1:3]:
        cluster.core.patch_node(other, {"spec": {"unschedulable": True}})
    cluster.objects.apply(
        {
            "apiVersion": JOBSET,
            "kind": "JobSet",
            "metadata": {"name": "gang", "namespace": NAMESPACE},
            "spec": spec,
        }
    )

    def running_on(nodes: set[str], attempt: str) -> bool:
        found = [p for p in gang_pods(cluster) if p.metadata.labels.get(RESTART_ATTEMPT) == attempt]
        return len(found) == GANG and all(
            p.status.phase == "Running" and not p.metadata.deletion_timestamp and p.spec.node_name in nodes
            for p in found
        )

    victim = names[0]
    cluster.wait("one of the gang's pods bound to the victim", lambda: any(p.spec.node_name == victim for p in gang_pods(cluster)), 60)  # fmt: skip
    for other in names[1:3]:
        cluster.core.patch_node(other, {"spec": {"unschedulable": False}})
    cluster.wait("the gang's first run running", lambda: running_on(set(names[:3]), "0"), 120)

    victim_kwok.send_signal(signal.SIGSTOP)  # the kubelet of the victim freezes
    cluster.wait(
        "the gang running again on the other nodes", lambda: running_on(set(names[1:3]), "1"), WITHIN_SECONDS
    )

    node = cluster.core.read_node(victim)
    assert {(t.key, t.effect) for t in node.spec.taints} >= {
        ("node.kubernetes.io/out-of-service", "NoExecute")
    }
    why = node.metadata.annotations["trainstack.dev/fenced"]
    assert f"instance {instances[0]} terminated" in why and f"{NAMESPACE}/gang-node-0-" in why, why
    down = float(why.split("not Ready ")[1].split(" s")[0])
    assert down >= AFTER_SECONDS, why
    state = ec2.describe_instances(InstanceIds=[instances[0]])["Reservations"][0]["Instances"][0]["State"]
    assert state["Name"] == "terminated"
    # The other instances stay; the group started a replacement.
    kept = ec2.describe_instances(InstanceIds=instances[1:])["Reservations"]
    assert {i["State"]["Name"] for r in kept for i in r["Instances"]} == {"running"}
    events = cluster.core.list_namespaced_event(
        "default", field_selector=f"involvedObject.name={victim},reason=TrainstackNodeFenced"
    ).items
    (event,) = events
    assert event.message.startswith(f"fenced: {why}"), event.message
    jobset = cluster.objects.get(JOBSET, "JobSet", "gang", NAMESPACE)
    assert jobset["status"]["restarts"] == 1, jobset["status"]
