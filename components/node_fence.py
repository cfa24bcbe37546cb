"""The hung-node fence on a cluster the stack created: workload/trainer/node_fence.py, run on the system
nodes from the stack's training image, watching the stack's GPU nodes.

A GPU node that stops answering while it holds a job's pod keeps that pod Terminating, and with it
the whole gang's restart (JobSet deletes its Jobs in the foreground; the Job controller replaces a
pod once it has failed). The fence replaces the node's instance through its Auto Scaling group and,
once EC2 reports it down, taints the node out-of-service, so Kubernetes' pod GC deletes its pods
and the gang restarts on other or replacement nodes. What it may do is exactly that: read nodes and
pods, patch nodes, write events; terminate instances of the stack's own GPU groups' Auto Scaling
groups, nothing else."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import node_controller
from components.node_controller import controller_identity
from components.pod_identity import EksAccess, autoscaling_group_arns
from conventions import GPU_NODE_LABEL, PART_OF

NAME = "trainstack-node-fence"
EVENTS_NAMESPACE = node_controller.EVENTS_NAMESPACE
# The breaker: most of the GPU nodes fenced at once (at least one), as EKS node repair stops past
# a share of a group.
MAX_SHARE = 0.2
ROUND_SECONDS = 15
RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
READ_ACTIONS = ("autoscaling:DescribeAutoScalingInstances", "ec2:DescribeInstances")
REPLACE_ACTION = "autoscaling:TerminateInstanceInAutoScalingGroup"


def node_selector() -> str:
    return ",".join(f"{k}={v}" for k, v in GPU_NODE_LABEL.items())


def fence_policy(region: str, account_id: str, group_names: list[str]) -> dict:
    """Describe calls take no resource; the one write names the stack's own GPU groups."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "FindTheInstance", "Effect": "Allow", "Action": list(READ_ACTIONS), "Resource": "*"},
            {
                "Sid": "ReplaceTheStacksGpuNodes",
                "Effect": "Allow",
                "Action": REPLACE_ACTION,
                "Resource": autoscaling_group_arns(region, account_id, group_names),
            },
        ],
    }


def cluster_role() -> dict[str, Any]:
    return {
        "metadata": {"name": NAME, "labels": dict(PART_OF)},
        "rules": [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        ],
    }


def events_role() -> dict[str, Any]:
    """Events on a node go in `default` (trainer.kube_api EVENTS_NAMESPACE)."""
    return node_controller.events_role(NAME)


def fence_args(after_seconds: int) -> list[str]:
    return [
        "--nodes",
        node_selector(),
        "--after",
        str(after_seconds),
        "--max-share",
        str(MAX_SHARE),
        "--interval",
        str(ROUND_SECONDS),
    ]


def deployment_spec(image: str, after_seconds: int, pod_placement: dict[str, Any]) -> dict[str, Any]:
    labels = {**PART_OF, "app.kubernetes.io/name": NAME}
    return {
        "replicas": 1,
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "serviceAccountName": NAME,
                **pod_placement,
                "containers": [
                    {
                        "name": "fence",
                        "image": image,
                        "command": ["python", "-m", "trainer.node_fence", *fence_args(after_seconds)],
                        "resources": RESOURCES,
                    }
                ],
            },
        },
    }


@dataclass
class NodeFenceArgs:
    provider: k8s.Provider
    eks: EksAccess
    namespace: pulumi.Input[str]
    image: pulumi.Input[str]
    after_seconds: int
    pod_placement: dict[str, Any]  # the system nodes'
    region: str
    account_id: str
    autoscaling_group_names: list[pulumi.Input[str]]  # the stack's GPU groups'
    waits_for: list[pulumi.Resource]  # the system nodes, the namespace


class NodeFence(pulumi.ComponentResource):
    def __init__(self, name: str, args: NodeFenceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:health:NodeFence", name, None, opts)
        identity = controller_identity(
            self,
            name,
            NAME,
            "Hung GPU node fence of trainstack (EKS Pod Identity)",
            pulumi.Output.all(*args.autoscaling_group_names).apply(
                lambda names: json.dumps(fence_policy(args.region, args.account_id, list(names)))
            ),
            args.provider,
            args.eks,
            args.namespace,
            cluster_role(),
            args.waits_for,
        )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": NAME, "namespace": args.namespace, "labels": dict(PART_OF)},
            spec=pulumi.Output.from_input(args.image).apply(
                lambda image: deployment_spec(image, args.after_seconds, args.pod_placement)
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                # Its credentials exist before its first round.
                depends_on=[*args.waits_for, identity.account, identity.association],
            ),
        )
        self.register_outputs({"afterSeconds": args.after_seconds})
