"""pulumi-eks's provider, emulated: what its components create inside them, and their kubeconfig.

`eks.Cluster` creates the EKS cluster (returned as `eksCluster`), its two security groups unless
skipDefaultSecurityGroups, the vpc-cni, kube-proxy and coredns add-ons unless disabled, and an access
entry per `accessEntries` key; a second entry for the cluster creator is refused with `ProviderRefusal`,
as EKS refuses it (bootstrapClusterCreatorAdminPermissions already made one). Its `kubeconfig`
output, and `Cluster.getKubeconfig` with a profile or role, are `eks_kubeconfig`.
`eks.ManagedNodeGroup` creates one aws.eks.NodeGroup. The children are queued per parent for the
monitor to register (`take_children`).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable
from typing import Any

import pulumi

from domain.principals import role_of_principal, same_principal
from offline.engine.aws_answers import NewResource, OfflineAws, ResourceAnswer, arn
from offline.engine.pulumi_wire import resource_ref
from offline.engine.recording import RemoteChild

# The security group EKS itself creates for a cluster (vpcConfig.clusterSecurityGroupId), and the
# one pulumi-eks adds unless skipDefaultSecurityGroups is set: two different groups.
EKS_CLUSTER_SECURITY_GROUP = "sg-0e4c5a1b2c3d4e5f6"
PULUMI_EKS_CLUSTER_SECURITY_GROUP = "sg-0c1a2b3c4d5e6f708"
PULUMI_EKS_NODE_SECURITY_GROUP = "sg-0f9e8d7c6b5a40312"
CLUSTER = "eks:index:Cluster"
MANAGED_NODE_GROUP = "eks:index:ManagedNodeGroup"


class ProviderRefusal(Exception):
    """What a real provider answers for a request AWS refuses (the offline engine raises it too)."""


def eks_kubeconfig(
    cluster: str, endpoint: str, region: str, profile: str | None = None, role_arn: str | None = None
) -> dict[str, Any]:
    """The kubeconfig pulumi-eks generates (nodejs/eks/cluster/cluster.ts, generateKubeconfig)."""
    args = ["--region", region, "eks", "get-token", "--cluster-name", cluster, "--output", "json"]
    if role_arn:
        args += ["--role", role_arn]
    if profile:  # --profile, not AWS_PROFILE: ambient credentials would override the variable
        args += ["--profile", profile]
    return {
        "apiVersion": "v1",
        "clusters": [
            {"cluster": {"server": endpoint, "certificate-authority-data": "LS0t"}, "name": "kubernetes"}
        ],
        "contexts": [{"context": {"cluster": "kubernetes", "user": "aws"}, "name": "aws"}],
        "current-context": "aws",
        "kind": "Config",
        "users": [
            {
                "name": "aws",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                        "args": args,
                        "env": [
                            {
                                "name": "KUBERNETES_EXEC_INFO",
                                "value": '{"apiVersion": "client.authentication.k8s.io/v1beta1"}',
                            }
                        ],
                    }
                },
            }
        ],
    }


def _child_ref(parent_type: str, child_type: str, child_name: str, id_: str) -> dict[str, str]:
    """A reference to a child a component created, as the provider returns it in an output."""
    stack_urn_prefix = f"urn:pulumi:{pulumi.get_stack()}::{pulumi.get_project()}"
    return resource_ref(f"{stack_urn_prefix}::{parent_type}${child_type}::{child_name}", id_)


class PulumiEks:
    """pulumi-eks's components, answered as its provider would, in `aws`'s region and account."""

    def __init__(self, aws: OfflineAws):
        self.aws = aws
        # Registrations run on several threads: children are kept per (type, name) of their parent.
        self._children: dict[tuple[str, str], list[RemoteChild]] = {}
        self._kubeconfig_parts: dict[str, tuple[str, str]] = {}

    def resources(self) -> dict[str, ResourceAnswer]:
        """The components answered here, by type token."""
        return {CLUSTER: self.cluster, MANAGED_NODE_GROUP: self.managed_node_group}

    def calls(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        """The component methods answered here, by token."""
        return {f"{CLUSTER}/getKubeconfig": self.get_kubeconfig}

    def take_children(self, type_: str, name: str) -> list[RemoteChild]:
        return self._children.pop((type_, name), [])

    def cluster(self, r: NewResource) -> dict[str, Any]:
        region, state = self.aws.region, r.state
        name = state.get("name", "cluster")
        eks_cluster = self._cluster_children(r.resource_name, name, state)
        endpoint = (
            f"https://{hashlib.sha1(name.encode()).hexdigest()[:32].upper()}.gr7.{region}.eks.amazonaws.com"
        )
        # The `kubeconfig` output never names a profile (kubeconfigWithoutProfile in pulumi-eks).
        kubeconfig = eks_kubeconfig(name, endpoint, region)
        self._kubeconfig_parts[r.resource_name] = (name, endpoint)
        # pulumi-eks (nodejs/eks/cluster/cluster.ts): clusterSecurityGroupId is its own group when
        # it creates one, else the EKS-created group (`core.clusterSecurityGroup?.id ?? ...`).
        skip_sgs = bool(state.get("skipDefaultSecurityGroups"))
        return {
            "kubeconfig": kubeconfig,
            "kubeconfigJson": json.dumps(kubeconfig),
            "clusterSecurityGroupId": EKS_CLUSTER_SECURITY_GROUP
            if skip_sgs
            else PULUMI_EKS_CLUSTER_SECURITY_GROUP,
            "eksCluster": eks_cluster,
        }

    def get_kubeconfig(self, args: dict[str, Any]) -> dict[str, Any]:
        """pulumi-eks's Cluster.getKubeconfig: the same kubeconfig, with --profile / --role."""
        resource_name = str(args["__self__"]).rsplit("::", 1)[-1]
        name, endpoint = self._kubeconfig_parts[resource_name]
        config = eks_kubeconfig(name, endpoint, self.aws.region, args.get("profileName"), args.get("roleArn"))
        return {"result": json.dumps(config)}

    def _cluster_children(self, resource_name: str, name: str, state: dict[str, Any]) -> dict[str, str]:
        """Queue what pulumi-eks creates inside `eks.Cluster`; return the reference to the EKS cluster."""
        cluster_type = "aws:eks/cluster:Cluster"
        cluster_child = f"{resource_name}-eksCluster"
        on_cluster = [(cluster_type, cluster_child)]
        children = [
            RemoteChild(
                cluster_type,
                cluster_child,
                f"{name}",
                {
                    "name": name,
                    "version": state.get("version"),
                    "arn": arn("eks", f"cluster/{name}", self.aws.region),
                    "vpcConfig": {
                        "clusterSecurityGroupId": EKS_CLUSTER_SECURITY_GROUP,
                        "vpcId": state.get("vpcId"),
                        "subnetIds": state.get("privateSubnetIds", []) + state.get("publicSubnetIds", []),
                    },
                },
            )
        ]
        if not state.get("skipDefaultSecurityGroups"):
            for suffix, sg in (
                ("eksClusterSecurityGroup", PULUMI_EKS_CLUSTER_SECURITY_GROUP),
                ("nodeSecurityGroup", PULUMI_EKS_NODE_SECURITY_GROUP),
            ):
                children.append(
                    RemoteChild("aws:ec2/securityGroup:SecurityGroup", f"{resource_name}-{suffix}", sg, {})
                )
        # Add-ons pulumi-eks creates unless told not to (`enabled` defaults to true).
        for addon, key in (
            ("vpc-cni", "vpcCniOptions"),
            ("kube-proxy", "kubeProxyAddonOptions"),
            ("coredns", "corednsAddonOptions"),
        ):
            options = state.get(key) or {}
            if options.get("enabled", True) is False:
                continue
            children.append(
                RemoteChild(
                    "aws:eks/addon:Addon",
                    f"{resource_name}-{addon}",
                    f"{name}:{addon}",
                    {
                        "clusterName": name,
                        "addonName": addon,
                        "addonVersion": options.get("addonVersion") or options.get("version"),
                    },
                    on_cluster,
                )
            )
        # EKS's own entry is for whoever created the cluster, at the first run.
        creator = role_of_principal(self.aws.cluster_creator())
        for key, entry in (state.get("accessEntries") or {}).items():
            principal = entry.get("principalArn", "")
            # bootstrapClusterCreatorAdminPermissions: EKS already made the creator's entry.
            if same_principal(principal, creator):
                raise ProviderRefusal(
                    f"creating EKS access entry {key} for {principal}: ResourceInUseException: "
                    "The specified access entry resource is already in use on this cluster "
                    "(the cluster creator's entry exists)."
                )
            children.append(
                RemoteChild(
                    "aws:eks/accessEntry:AccessEntry",
                    f"{resource_name}-{key}",
                    f"{name}:{principal}",
                    {"clusterName": name, "principalArn": principal},
                    on_cluster,
                )
            )
        self._children[(CLUSTER, resource_name)] = children
        return _child_ref(CLUSTER, cluster_type, cluster_child, name)

    def managed_node_group(self, r: NewResource) -> dict[str, Any]:
        """pulumi-eks's ManagedNodeGroup creates one aws.eks.NodeGroup of the same name; EKS names
        the group's Auto Scaling group `eks-<node group>-<node group uuid>`."""
        resource_name, state = r.resource_name, r.state
        name = state.get("nodeGroupName") or resource_name
        uid = str(uuid.UUID(hashlib.md5(name.encode()).hexdigest()))
        node_group_type = "aws:eks/nodeGroup:NodeGroup"
        scaling = state.get("scalingConfig") or {}
        self._children[(MANAGED_NODE_GROUP, resource_name)] = [
            RemoteChild(
                node_group_type,
                resource_name,
                f"{state.get('clusterName', 'cluster')}:{name}",
                {
                    "nodeGroupName": name,
                    "scalingConfig": scaling,
                    "labels": state.get("labels") or {},
                    "resources": [{"autoscalingGroups": [{"name": f"eks-{name}-{uid}"}]}],
                },
            )
        ]
        return {"nodeGroup": _child_ref(MANAGED_NODE_GROUP, node_group_type, resource_name, name)}
