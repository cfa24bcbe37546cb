"""The health gate on a cluster the stack created: workload/trainer/health_gate.py, run on the system
nodes from the stack's training image, burning in each new node of a burnt-in GPU group and
watching every gated group's nodes while they train.

A burnt-in group's node registers with the startup taint (conventions.HEALTH_STARTUP_TAINT), which
no job tolerates; the gate runs the burn-in pod on it (workload/trainer/burn_in.py, NVIDIA's DCGM
image, trainer.preflight) and removes the taint once it passed, or puts a NoExecute taint in its place
and has the node's Auto Scaling group replace it (instance health Unhealthy), within the breaker.
What it may do is exactly that: read and patch nodes and list their pods; create, read and delete pods and keep its
floors' ConfigMap in its namespace; write events; mark instances of the stack's own GPU groups'
Auto Scaling groups unhealthy, nothing else."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import node_controller
from components.jobs.pods import EFA_ENV
from components.node_controller import controller_identity
from components.pod_identity import EksAccess, autoscaling_group_arns
from conventions import GPU_NODE_LABEL, PART_OF
from domain import node_health
from domain.catalog import InstanceType
from domain.node_health import (
    DCGM_IMAGE,
    MAX_FAILING_SHARE,
    has_nvlink,
    published_bus_gbps,
)

NAME = "trainstack-health-gate"
EVENTS_NAMESPACE = node_controller.EVENTS_NAMESPACE
FLOORS = "trainstack-health-floors"  # the ConfigMap the gate alone writes: never a stack resource
ROUND_SECONDS = 10
RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}
READ_ACTION = "autoscaling:DescribeAutoScalingInstances"
REPLACE_ACTION = "autoscaling:SetInstanceHealth"


@dataclass(frozen=True)
class GatedGroup:
    """One GPU group the gate looks after, as its nodes will be."""

    name: str
    mode: str  # burnIn | passive
    instance_type: str
    instance: InstanceType
    efa: bool
    nodes: int  # the most the group holds
    dcgm_level: int
    floor_fraction: float

    def settings(self) -> dict[str, Any]:
        """What the gate's program reads for the group (trainer.health_gate Group.read). A burn-in
        that has not ended by twice its planned time plus ten minutes has failed. Until the group
        calibrates, its floor is the published two-node figure: one node's all-reduce runs over
        NVLink, which carries more than the EFA links between two, so a healthy node clears it."""
        deadline = int(60 * (2 * node_health.burn_in_minutes(self.dcgm_level, self.instance) + 10))
        return {
            "mode": self.mode,
            "gpus": self.instance.gpus,
            "efa": self.instance.max_efa_interfaces if self.efa else 0,
            "nvlink": has_nvlink(self.instance_type),
            "dcgmLevel": self.dcgm_level,
            "floorFraction": self.floor_fraction,
            "publishedBusGbps": published_bus_gbps(self.instance_type, 2),
            "nodes": self.nodes,
            "deadlineSeconds": deadline,
            "efaEnv": dict(EFA_ENV) if self.efa else {},
        }


def node_selector() -> str:
    return ",".join(f"{k}={v}" for k, v in GPU_NODE_LABEL.items())


def gate_policy(region: str, account_id: str, group_names: list[str]) -> dict:
    """The describe call takes no resource; the one write names the stack's own GPU groups."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "FindTheGroup", "Effect": "Allow", "Action": READ_ACTION, "Resource": "*"},
            {
                "Sid": "ReplaceTheStacksFailedGpuNodes",
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
            # What already runs on a node its group's new taint reached (trainer.health_gate uses_gpus).
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        ],
    }


def namespace_role(namespace: str) -> dict[str, Any]:
    """Its burn-in pods and its floors, in its own namespace."""
    return {
        "metadata": {"name": NAME, "namespace": namespace, "labels": dict(PART_OF)},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "create", "delete"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]},
        ],
    }


# The two pods of a two-node all-reduce reach each other (torchrun's rendezvous, NCCL's bootstrap) in
# a namespace whose ingress is denied by default (components/network_policy.py); EFA's own traffic
# is not IP and is the security group's.
PAIR_POLICY = {
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "trainstack-burn-in"}},
    "policyTypes": ["Ingress"],
    "ingress": [
        {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "trainstack-burn-in"}}}]}
    ],
}


def events_role() -> dict[str, Any]:
    return node_controller.events_role(NAME)


def gate_args(namespace: str, image: str, groups: list[GatedGroup]) -> list[str]:
    settings = {g.name: g.settings() for g in groups}
    return [
        "--nodes",
        node_selector(),
        "--namespace",
        namespace,
        "--groups",
        json.dumps(settings, sort_keys=True, separators=(",", ":")),
        "--image",
        image,
        "--dcgm-image",
        DCGM_IMAGE,
        "--floors",
        FLOORS,
        "--max-share",
        str(MAX_FAILING_SHARE),
        "--interval",
        str(ROUND_SECONDS),
    ]


def deployment_spec(
    namespace: str, image: str, groups: list[GatedGroup], pod_placement: dict[str, Any], region: str
) -> dict[str, Any]:
    labels = {**PART_OF, "app.kubernetes.io/name": NAME}
    return {
        "replicas": 1,
        # One gate at a time, also while it is upgraded: two would judge and patch the same nodes.
        "strategy": {"type": "Recreate"},
        "selector": {"matchLabels": labels},
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "serviceAccountName": NAME,
                **pod_placement,
                "containers": [
                    {
                        "name": "gate",
                        "image": image,
                        "command": [
                            "python",
                            "-m",
                            "trainer.health_gate",
                            *gate_args(namespace, image, groups),
                        ],
                        "env": [{"name": "AWS_REGION", "value": region}],
                        "resources": RESOURCES,
                    }
                ],
            },
        },
    }


@dataclass
class HealthGateArgs:
    provider: k8s.Provider
    eks: EksAccess
    namespace: pulumi.Input[str]
    image: pulumi.Input[str]
    groups: list[GatedGroup]
    pod_placement: dict[str, Any]  # the system nodes'
    region: str
    account_id: str
    autoscaling_group_names: list[pulumi.Input[str]]  # the gated groups'
    waits_for: list[pulumi.Resource]  # the system nodes, the namespace


class HealthGate(pulumi.ComponentResource):
    def __init__(self, name: str, args: HealthGateArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:health:HealthGate", name, None, opts)
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=args.waits_for)
        identity = controller_identity(
            self,
            name,
            NAME,
            "GPU node health gate of trainstack (EKS Pod Identity)",
            pulumi.Output.all(*args.autoscaling_group_names).apply(
                lambda names: json.dumps(gate_policy(args.region, args.account_id, list(names)))
            ),
            args.provider,
            args.eks,
            args.namespace,
            cluster_role(),
            args.waits_for,
        )
        own = pulumi.Output.from_input(args.namespace).apply(namespace_role)
        pods_role = k8s.rbac.v1.Role(
            f"{name}-pods", metadata=own["metadata"], rules=own["rules"], opts=k8s_opts
        )
        k8s.rbac.v1.RoleBinding(
            f"{name}-pods",
            metadata={"name": NAME, "namespace": args.namespace, "labels": dict(PART_OF)},
            role_ref={
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": pods_role.metadata.name,
            },
            subjects=identity.subjects,
            opts=k8s_opts,
        )
        k8s.networking.v1.NetworkPolicy(
            f"{name}-burn-in",
            metadata={"name": "trainstack-burn-in", "namespace": args.namespace, "labels": dict(PART_OF)},
            spec=PAIR_POLICY,
            opts=k8s_opts,
        )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={"name": NAME, "namespace": args.namespace, "labels": dict(PART_OF)},
            spec=pulumi.Output.all(args.namespace, args.image).apply(
                lambda values: deployment_spec(
                    values[0], values[1], args.groups, args.pod_placement, args.region
                )
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                # Its credentials exist before its first round.
                depends_on=[*args.waits_for, identity.account, identity.association],
            ),
        )
        self.register_outputs({"groups": {g.name: g.mode for g in args.groups}})
