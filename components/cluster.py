"""The EKS cluster (pulumi-eks): API access entries, KMS secrets encryption, logs, add-ons, system nodes."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from components.iam import service_trust
from components.network import Network

CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
# The minimum a node needs: join the cluster, run the VPC CNI, pull images.
NODE_MANAGED_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
)
SYSTEM_NODE_LABEL = {"trainstack.dev/role": "system"}


@dataclass(frozen=True)
class ClusterArgs:
    cluster_name: str
    kubernetes_version: str
    addon_versions: dict[str, str]
    network: Network
    endpoint_public_access: bool
    endpoint_private_access: bool
    public_access_cidrs: tuple[str, ...]
    admin_principals: tuple[str, ...]
    control_plane_logs: tuple[str, ...]
    system_instance_type: str
    system_min_size: int
    system_desired_size: int
    system_max_size: int
    system_disk_size_gib: int
    deletion_protection: bool


class Cluster(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:compute:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.cluster_name = args.cluster_name

        self.secrets_key = aws.kms.Key(
            f"{name}-secrets",
            description=f"Envelope encryption of Kubernetes secrets in {args.cluster_name}",
            enable_key_rotation=True,
            deletion_window_in_days=30,
            opts=child,
        )
        self.node_role = aws.iam.Role(
            f"{name}-node",
            assume_role_policy=json.dumps(service_trust("ec2.amazonaws.com")),
            opts=child,
        )
        node_policies = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{arn.rsplit('/', 1)[1]}", role=self.node_role.name, policy_arn=arn, opts=child
            )
            for arn in NODE_MANAGED_POLICIES
        ]

        versions = args.addon_versions
        self.eks = eks.Cluster(
            name,
            name=args.cluster_name,
            version=args.kubernetes_version,
            vpc_id=args.network.vpc_id,
            private_subnet_ids=args.network.private_subnet_ids,
            public_subnet_ids=args.network.public_subnet_ids,
            endpoint_public_access=args.endpoint_public_access,
            endpoint_private_access=args.endpoint_private_access,
            public_access_cidrs=list(args.public_access_cidrs) if args.endpoint_public_access else None,
            authentication_mode=eks.AuthenticationMode.API,
            access_entries={
                f"admin-{i}": eks.AccessEntryArgs(
                    principal_arn=arn,
                    access_policies={
                        "cluster-admin": eks.AccessPolicyAssociationArgs(
                            policy_arn=CLUSTER_ADMIN_POLICY, access_scope={"type": "cluster"}
                        )
                    },
                )
                for i, arn in enumerate(args.admin_principals)
            },
            encryption_config_key_arn=self.secrets_key.arn,
            enabled_cluster_log_types=list(args.control_plane_logs),
            skip_default_node_group=True,
            instance_roles=[self.node_role],
            node_associate_public_ip_address=False,
            deletion_protection=args.deletion_protection,
            # vpc-cni >= 1.18.4 understands efa-only interfaces.
            vpc_cni_options=eks.VpcCniOptionsArgs(addon_version=versions["vpc-cni"]),
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(version=versions["coredns"]),
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(version=versions["kube-proxy"]),
            opts=pulumi.ResourceOptions(parent=self, depends_on=node_policies),
        )

        self.system_nodes = eks.ManagedNodeGroup(
            f"{name}-system",
            cluster=self.eks,
            node_group_name=f"{args.cluster_name}-system",
            node_role=self.node_role,
            ami_type="AL2023_x86_64_STANDARD",
            instance_types=[args.system_instance_type],
            disk_size=args.system_disk_size_gib,
            subnet_ids=args.network.private_subnet_ids,
            scaling_config={
                "min_size": args.system_min_size,
                "desired_size": args.system_desired_size,
                "max_size": args.system_max_size,
            },
            labels=SYSTEM_NODE_LABEL,
            opts=child,
        )
        self.pod_identity_agent = aws.eks.Addon(
            f"{name}-eks-pod-identity-agent",
            cluster_name=args.cluster_name,
            addon_name="eks-pod-identity-agent",
            addon_version=versions["eks-pod-identity-agent"],
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            # A DaemonSet: it needs nodes to become healthy.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.eks, self.system_nodes]),
        )

        self.kubeconfig = pulumi.Output.secret(self.eks.kubeconfig_json)
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            # Large CRDs (PyTorchJob, RayJob) exceed the client-side apply annotation limit.
            enable_server_side_apply=True,
            opts=child,
        )
        self.cluster_security_group_id = self.eks.cluster_security_group_id
        self.register_outputs({"clusterName": self.cluster_name, "kubeconfig": self.kubeconfig})
