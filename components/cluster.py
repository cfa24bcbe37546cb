"""The EKS cluster (pulumi-eks): API access entries, KMS secrets encryption, logs, add-ons, system nodes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from components.iam import pod_identity_trust, service_trust
from components.network import Network
from conventions import SYSTEM_NODE_LABEL
from domain.names import control_plane_log_group, node_group_name
from domain.principals import same_principal

CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
CLUSTER_VIEW_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSViewPolicy"
# The minimum a node needs: join the cluster, run the VPC CNI, pull images.
NODE_MANAGED_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly",
)


# The add-on's chart gives its DCGM host engine (the dcgm-server DaemonSet) no tolerations, while
# every GPU node carries the stack's nvidia.com/gpu taint: without this DCGM never runs on a GPU
# node, the agent reports a DCGM error on healthy nodes, and node auto repair acts on them. It
# tolerates what the agent itself tolerates (the chart's nodeAgent.tolerations).
NODE_MONITORING_AGENT_VALUES = {"dcgmAgent": {"tolerations": [{"operator": "Exists"}]}}
# The add-on's network policy agent (in aws-node) enforces the NetworkPolicies the stack writes
# (components/network_policy.py); off by default, when every pod takes connections from any pod. The
# add-on's configuration schema spells it as a string. pulumi-eks passes configurationValues through
# to the add-on, its own env defaults merged in (nodejs/eks/addons/cni-addon.ts,
# mergeConfigurationValues).
VPC_CNI_VALUES = {"enableNetworkPolicy": "true"}


@dataclass(frozen=True)
class ClusterArgs:
    cluster_name: str
    kubernetes_version: str
    support_type: str  # the cluster's upgradePolicy: STANDARD or EXTENDED
    addon_versions: dict[str, str]
    network: Network
    endpoint_public_access: bool
    endpoint_private_access: bool
    public_access_cidrs: tuple[str, ...]
    admin_principals: tuple[str, ...]
    # Who created the cluster (recorded at the first run, never the current caller): EKS made
    # that principal cluster admin itself, and a second entry for it fails.
    creator_arn: str
    creator_parameter: str  # the SSM parameter that records it
    control_plane_logs: tuple[str, ...]
    control_plane_log_retention_days: int
    system_instance_type: str
    system_min_size: int
    system_desired_size: int
    system_max_size: int
    system_disk_size_gib: int
    deletion_protection: bool
    aws_profile: str | None = None  # aws:profile: the kubeconfig's `aws eks get-token` needs it too
    node_monitoring_agent: bool = True  # GPU/EFA/kubelet faults as node conditions (for auto repair)
    gpu_metrics: bool = False  # CloudWatch Container Insights with the DCGM exporter
    # GitHub Actions roles: deploy administers the cluster, preview only reads it (Secrets excluded).
    ci_deploy_role_arn: pulumi.Input[str] | None = None
    ci_preview_role_arn: pulumi.Input[str] | None = None


def entry_key(principal: str) -> str:
    """An access entry's key from its principal, not its place in a list: removing one admin
    touches only that entry (a shifted index would replace the others, create-before-delete)."""
    kind_and_name = principal.split(":", 5)[-1]
    return re.sub(r"[^A-Za-z0-9-]+", "-", kind_and_name).strip("-")


def access_entries(
    admins: list[str], ci_deploy: pulumi.Input[str] | None, ci_preview: pulumi.Input[str] | None
) -> dict[str, eks.AccessEntryArgs]:
    def entry(principal: pulumi.Input[str], access: str, policy: str) -> eks.AccessEntryArgs:
        return eks.AccessEntryArgs(
            principal_arn=principal,
            access_policies={
                access: eks.AccessPolicyAssociationArgs(policy_arn=policy, access_scope={"type": "cluster"})
            },
        )

    entries = {entry_key(arn): entry(arn, "cluster-admin", CLUSTER_ADMIN_POLICY) for arn in admins}
    if ci_deploy is not None:
        entries["ci-deploy"] = entry(ci_deploy, "cluster-admin", CLUSTER_ADMIN_POLICY)
    if ci_preview is not None:
        entries["ci-preview"] = entry(ci_preview, "cluster-view", CLUSTER_VIEW_POLICY)
    return entries


# Where the amazon-cloudwatch-observability add-on runs its agent (the add-on's own namespace).
CLOUDWATCH_NAMESPACE = "amazon-cloudwatch"
CLOUDWATCH_SERVICE_ACCOUNT = "cloudwatch-agent"
# IMDSv2 with hop limit 1 on every node: pods (one network hop away) cannot reach IMDS and borrow
# the node role; Pod Identity needs no IMDS, and host-network daemons are not a hop away.
NODE_METADATA_OPTIONS = {
    "http_tokens": "required",
    "http_put_response_hop_limit": 1,
    "http_endpoint": "enabled",
}


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

        # EKS would create /aws/eks/<cluster>/cluster itself, with no retention, kept after destroy.
        # Created first, it is the stack's: retention set, removed with the stack.
        self.control_plane_logs = (
            aws.cloudwatch.LogGroup(
                f"{name}-control-plane-logs",
                name=control_plane_log_group(args.cluster_name),
                retention_in_days=args.control_plane_log_retention_days,
                opts=child,
            )
            if args.control_plane_logs
            else None
        )
        versions = args.addon_versions
        self.creator = aws.ssm.Parameter(
            f"{name}-creator",
            name=args.creator_parameter,
            type="String",
            insecure_value=args.creator_arn,  # an ARN, not a secret: previews show it
            description=f"Created {args.cluster_name}: EKS made it cluster admin (no access entry of ours)",
            opts=child,
        )
        admins = [arn for arn in args.admin_principals if not same_principal(arn, args.creator_arn)]
        if len(admins) < len(args.admin_principals):
            # pulumi-eks keeps bootstrapClusterCreatorAdminPermissions: a second entry for the
            # creator fails with ResourceInUseException (pulumi/pulumi-eks#2373).
            pulumi.log.info(
                f"{args.creator_arn} created the cluster and is its admin through EKS's own entry; "
                "its adminPrincipals entry is not created again.",
                resource=self,
            )
        self.eks = eks.Cluster(
            name,
            name=args.cluster_name,
            version=args.kubernetes_version,
            # Set, not left to EKS's default: what happens at the end of standard support is a
            # cost (extended, 6x) or an upgrade outside Pulumi (standard).
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type=args.support_type),
            vpc_id=args.network.vpc_id,
            private_subnet_ids=args.network.private_subnet_ids,
            public_subnet_ids=args.network.public_subnet_ids,
            endpoint_public_access=args.endpoint_public_access,
            endpoint_private_access=args.endpoint_private_access,
            public_access_cidrs=list(args.public_access_cidrs) if args.endpoint_public_access else None,
            authentication_mode=eks.AuthenticationMode.API,
            access_entries=access_entries(admins, args.ci_deploy_role_arn, args.ci_preview_role_arn),
            encryption_config_key_arn=self.secrets_key.arn,
            provider_credential_opts=eks.KubeconfigOptionsArgs(profile_name=args.aws_profile)
            if args.aws_profile
            else None,
            enabled_cluster_log_types=list(args.control_plane_logs),
            skip_default_node_group=True,
            # Managed node groups use the security group EKS creates; pulumi-eks's own cluster and
            # node groups would only serve its self-managed node groups.
            skip_default_security_groups=True,
            deletion_protection=args.deletion_protection,
            # vpc-cni >= 1.18.4 understands efa-only interfaces.
            vpc_cni_options=eks.VpcCniOptionsArgs(
                addon_version=versions["vpc-cni"], configuration_values=VPC_CNI_VALUES
            ),
            # Created below once nodes exist: inside eks.Cluster it would wait for nodes that cannot
            # start yet and time out DEGRADED (pulumi/pulumi-eks#1819).
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(version=versions["kube-proxy"]),
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[*node_policies, *filter(None, [self.control_plane_logs])]
            ),
        )
        # The group EKS creates for the cluster: managed nodes without a launch template get it
        # automatically; nodes whose template names security groups must list it to join.
        self.cluster_security_group_id = self.eks.eks_cluster.apply(
            lambda c: c.vpc_config.cluster_security_group_id
        )

        system_group = node_group_name(args.cluster_name, "system")
        # Without a launch template EKS sets the metadata hop limit to 2: pods (Ray heads and
        # submitters, the operators) could reach IMDS and take the node role.
        self.system_launch_template = aws.ec2.LaunchTemplate(
            f"{name}-system-lt",
            name_prefix=f"{system_group}-",
            update_default_version=True,
            block_device_mappings=[
                {
                    "device_name": "/dev/xvda",  # AL2023's root; EKS refuses diskSize with a template
                    "ebs": {
                        "volume_size": args.system_disk_size_gib,
                        "volume_type": "gp3",
                        "encrypted": "true",
                        "delete_on_termination": "true",
                    },
                }
            ],
            metadata_options=NODE_METADATA_OPTIONS,
            opts=child,
        )
        self.system_nodes = eks.ManagedNodeGroup(
            f"{name}-system",
            cluster=self.eks,
            node_group_name=system_group,
            node_role=self.node_role,
            ami_type="AL2023_x86_64_STANDARD",
            instance_types=[args.system_instance_type],
            launch_template={
                "id": self.system_launch_template.id,
                "version": self.system_launch_template.latest_version.apply(str),
            },
            # pulumi-eks leaves the version unset with a launch template: EKS would keep the
            # creation-time version forever.
            version=args.kubernetes_version,
            subnet_ids=args.network.private_subnet_ids,
            scaling_config={
                "min_size": args.system_min_size,
                "desired_size": args.system_desired_size,
                "max_size": args.system_max_size,
            },
            labels=SYSTEM_NODE_LABEL,
            opts=child,
        )
        # Both need running nodes to become healthy (a Deployment and a DaemonSet).
        self.coredns, self.pod_identity_agent = (
            aws.eks.Addon(
                f"{name}-{addon}",
                cluster_name=args.cluster_name,
                addon_name=addon,
                addon_version=versions[addon],
                resolve_conflicts_on_create="OVERWRITE",
                resolve_conflicts_on_update="OVERWRITE",
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.eks, self.system_nodes]),
            )
            for addon in ("coredns", "eks-pod-identity-agent")
        )
        # Health add-ons whose builds per Kubernetes version are not confirmed here: EKS's default
        # for the cluster's version at creation, kept on later runs (no version input to drift).
        self.health_addons = []
        if args.node_monitoring_agent:
            self.health_addons.append(
                self._health_addon(
                    name, "eks-node-monitoring-agent", args, configuration=NODE_MONITORING_AGENT_VALUES
                )
            )
        if args.gpu_metrics:
            # Its CloudWatch agent writes metrics as its own service account, not the node role.
            agent = aws.iam.Role(
                f"{name}-cloudwatch-agent",
                description="CloudWatch agent of trainstack (EKS Pod Identity)",
                assume_role_policy=json.dumps(
                    pod_identity_trust(args.cluster_name, CLOUDWATCH_NAMESPACE, CLOUDWATCH_SERVICE_ACCOUNT)
                ),
                opts=child,
            )
            aws.iam.RolePolicyAttachment(
                f"{name}-cloudwatch-agent-policy",
                role=agent.name,
                policy_arn="arn:aws:iam::aws:policy/CloudWatchAgentServerPolicy",
                opts=child,
            )
            self.health_addons.append(
                self._health_addon(
                    name,
                    "amazon-cloudwatch-observability",
                    args,
                    [{"role_arn": agent.arn, "service_account": CLOUDWATCH_SERVICE_ACCOUNT}],
                    [self.pod_identity_agent],
                )
            )

        # pulumi-eks's `kubeconfig` output never names a profile: with only aws:profile set, its
        # `aws eks get-token` would run as the default credentials. This one carries the profile.
        self.kubeconfig = pulumi.Output.secret(
            self.eks.get_kubeconfig(profile_name=args.aws_profile)
            if args.aws_profile
            else self.eks.kubeconfig_json
        )
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=self.kubeconfig,
            # Large CRDs (PyTorchJob, RayJob) exceed the client-side apply annotation limit.
            enable_server_side_apply=True,
            opts=child,
        )
        self.register_outputs({"clusterName": self.cluster_name, "kubeconfig": self.kubeconfig})

    def _health_addon(
        self,
        name: str,
        addon: str,
        args: ClusterArgs,
        identities: list[dict] | None = None,
        deps: list[pulumi.Resource] | None = None,
        configuration: dict | None = None,
    ) -> aws.eks.Addon:
        return aws.eks.Addon(
            f"{name}-{addon}",
            cluster_name=args.cluster_name,
            addon_name=addon,
            pod_identity_associations=identities,
            configuration_values=json.dumps(configuration) if configuration else None,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.eks, self.system_nodes, *(deps or [])]),
        )
