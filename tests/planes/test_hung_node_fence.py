"""The hung-node fence on a cluster the stack created (components/node_fence.py, planes/health.py):
one Deployment on the system nodes in the stack's image, watching the GPU nodes, with exactly the
rights a fence takes; none where there is nothing to fence, no image to run it or it is turned off.
Its behaviour is tests/workload/test_node_fence.py and, on the real controllers,
tests/cluster/test_hung_node.py."""

from __future__ import annotations

import json

from support.config_rules import problems
from support.plans import plan, stack_values

from components.node_fence import NAME, REPLACE_ACTION
from conventions import GPU_NODE_LABEL, SYSTEM_NODE_LABEL

DEPLOYMENT = "kubernetes:apps/v1:Deployment"


def dev_cluster(**extra) -> dict:
    return {**json.loads(stack_values("dev")["trainstack:cluster"]), **extra}


def fence(run):
    found = [r for r in run.by_type(DEPLOYMENT) if r.inputs["metadata"]["name"] == NAME]
    return found[0] if found else None


def test_the_fence_runs_on_the_system_nodes_in_the_stacks_image_watching_the_gpu_nodes(dev_plan):
    deployment = fence(dev_plan)
    assert deployment is not None
    pod = deployment.inputs["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == SYSTEM_NODE_LABEL and "tolerations" not in pod
    assert pod["serviceAccountName"] == NAME
    (container,) = pod["containers"]
    (job,) = dev_plan.by_type("kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob")
    assert container["image"] == job.inputs["spec"]["trainer"]["image"]  # the stack's image
    command = container["command"]
    assert command[:3] == ["python", "-m", "trainer.node_fence"]
    flags = dict(zip(command[3::2], command[4::2], strict=True))
    assert flags["--nodes"] == ",".join(f"{k}={v}" for k, v in GPU_NODE_LABEL.items())
    assert flags["--after"] == "180"
    # Its identity may replace instances of the stack's GPU groups' Auto Scaling groups only.
    (association,) = [a for a in dev_plan.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
                      if a.inputs["serviceAccount"] == NAME]  # fmt: skip
    policy = json.loads(dev_plan.one("aws:iam/rolePolicy:RolePolicy", "node-fence-policy").inputs["policy"])
    (replace,) = [s for s in policy["Statement"] if s["Action"] == REPLACE_ACTION]
    assert all(":autoScalingGroupName/" in arn for arn in replace["Resource"]), replace
    assert association.inputs["namespace"] == deployment.inputs["metadata"]["namespace"]
    role = dev_plan.one("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole", "node-fence-nodes")
    assert {(tuple(r["resources"]), tuple(r["verbs"])) for r in role.inputs["rules"]} == {
        (("nodes",), ("get", "list", "patch")),
        (("pods",), ("list",)),
    }


def test_the_setting_moves_the_bound_and_zero_turns_the_fence_off():
    run = plan("dev", cluster=dev_cluster(fenceHungNodesAfterSeconds=600))
    command = fence(run).inputs["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[command.index("--after") + 1] == "600"
    assert fence(plan("dev", cluster=dev_cluster(fenceHungNodesAfterSeconds=0))) is None


def test_no_fence_without_the_stacks_image_to_run_it():
    run = plan("dev", image={"builder": "none"}, jobs=[{"name": "x", "kind": "TrainJob", "nodeGroup": "gpu",
                                                        "image": "example.com/own:1"}])  # fmt: skip
    assert fence(run) is None


def test_a_bound_out_of_range_is_refused_naming_the_key():
    (msg,) = problems(cluster=dev_cluster(fenceHungNodesAfterSeconds=30))
    assert msg.startswith("trainstack:cluster.fenceHungNodesAfterSeconds = 30: out of range"), msg
    assert msg.endswith("allowed: 0 (off) or 60-3600"), msg
