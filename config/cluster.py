"""Cluster plane config: the EKS control plane, who administers it, and the system nodes."""

from __future__ import annotations

import datetime
import ipaddress
import re
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from config.names import PROJECT
from config.schema import Problem, Reader, setting
from domain.catalog import CPU_INSTANCE_TYPES

# Add-on versions are pinned per Kubernetes version, so a later run never drifts: 1.33/1.34 from the
# EKS user guide's version tables, 1.35/1.36 from builds public EKS clusters of those versions run
# (the EKS guide stored here predates them). Check a pin with
# `aws eks describe-addon-versions --kubernetes-version <v> --addon-name <name>`.
EKS_ADDON_VERSIONS: dict[str, dict[str, str]] = {
    "1.33": {
        "vpc-cni": "v1.20.1-eksbuild.3",
        "coredns": "v1.12.4-eksbuild.1",
        "kube-proxy": "v1.33.5-eksbuild.2",
        "eks-pod-identity-agent": "v1.3.9-eksbuild.3",
    },
    "1.34": {
        "vpc-cni": "v1.20.1-eksbuild.3",
        "coredns": "v1.12.4-eksbuild.1",
        "kube-proxy": "v1.34.1-eksbuild.2",
        "eks-pod-identity-agent": "v1.3.9-eksbuild.3",
    },
    "1.35": {
        "vpc-cni": "v1.21.1-eksbuild.3",
        "coredns": "v1.13.2-eksbuild.1",
        "kube-proxy": "v1.35.0-eksbuild.2",
        "eks-pod-identity-agent": "v1.3.10-eksbuild.3",
    },
    "1.36": {
        "vpc-cni": "v1.22.4-eksbuild.3",
        "coredns": "v1.14.3-eksbuild.16",
        "kube-proxy": "v1.36.0-eksbuild.21",
        "eks-pod-identity-agent": "v1.3.10-eksbuild.3",
    },
}

# EKS's calendar (../shared/reference/eks-versions.md): end of standard, then of extended support.
# 1.33 and 1.34 stay allowed so a stack on them can upgrade one minor version at a time.
SUPPORT_ENDS: dict[str, tuple[datetime.date, datetime.date]] = {
    "1.33": (datetime.date(2026, 7, 29), datetime.date(2027, 7, 29)),
    "1.34": (datetime.date(2026, 12, 2), datetime.date(2027, 12, 2)),
    "1.35": (datetime.date(2027, 3, 27), datetime.date(2028, 3, 27)),
    "1.36": (datetime.date(2027, 8, 2), datetime.date(2028, 8, 2)),
}
STANDARD_SUPPORT_HOURLY_USD = 0.10
EXTENDED_SUPPORT_HOURLY_USD = 0.60

# CloudWatch Logs' PutRetentionPolicy accepts these only.
LOG_RETENTION_CHOICES = (
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
)

KubernetesVersion = Literal["1.33", "1.34", "1.35", "1.36"]
SupportType = Literal["STANDARD", "EXTENDED"]


def support_status(version: str, today: datetime.date) -> tuple[str, float]:
    """(what EKS says of the version on `today`, the control plane's price per hour then)."""
    standard, extended = SUPPORT_ENDS[version]
    if today <= standard:
        return f"standard support until {standard}", STANDARD_SUPPORT_HOURLY_USD
    if today <= extended:
        return f"extended support until {extended} (standard ended {standard})", EXTENDED_SUPPORT_HOURLY_USD
    return f"out of support since {extended}", EXTENDED_SUPPORT_HOURLY_USD


ControlPlaneLog = Literal["api", "audit", "authenticator", "controllerManager", "scheduler"]

_PRINCIPAL = re.compile(r"arn:aws[-a-z]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9_+=,.@/-]+")


@dataclass(frozen=True)
class SystemNodeGroupConfig:
    instance_type: str = setting("instanceType", "CPU instance type for operators.", "m6i.large")
    min_size: int = setting("minSize", "Smallest node count.", 1)
    desired_size: int = setting("desiredSize", "Node count at creation.", 2)
    max_size: int = setting("maxSize", "Largest node count.", 3)
    disk_size_gib: int = setting("diskSizeGiB", "Root volume size in GiB (20-1000).", 50)


@dataclass(frozen=True)
class ClusterConfig:
    kubernetes_version: KubernetesVersion = setting(
        "kubernetesVersion",
        "EKS Kubernetes version; add-ons are pinned per version. Upgrade one minor version per run.",
        "1.36",
    )
    support_type: SupportType = setting(
        "supportType",
        "At the end of standard support: EXTENDED keeps the version (at $0.60/h), STANDARD lets EKS "
        "upgrade the control plane itself (then set kubernetesVersion to match).",
        "EXTENDED",
    )
    endpoint_public_access: bool = setting(
        "endpointPublicAccess",
        "Expose the API endpoint publicly, to publicAccessCidrs only. Off: the private endpoint, reached "
        "from inside the VPC (Pulumi must run there too).",
        False,
    )
    endpoint_private_access: bool = setting(
        "endpointPrivateAccess", "Expose the API endpoint inside the VPC.", True
    )
    public_access_cidrs: tuple[str, ...] = setting(
        "publicAccessCidrs",
        "CIDRs allowed to reach the public endpoint: required with endpointPublicAccess (never 0.0.0.0/0).",
        factory=tuple,
    )
    admin_principals: tuple[str, ...] = setting(
        "adminPrincipals", "IAM role/user ARNs granted cluster admin through access entries.", factory=tuple
    )
    control_plane_logs: tuple[ControlPlaneLog, ...] = setting(
        "controlPlaneLogs",
        "Control-plane log types sent to CloudWatch.",
        factory=lambda: ("api", "audit", "authenticator"),
    )
    control_plane_log_retention_days: int = setting(
        "controlPlaneLogRetentionDays",
        "Days CloudWatch keeps control-plane logs (the stack owns the log group; 1-3653).",
        30,
    )
    system_node_group: SystemNodeGroupConfig = setting(
        "systemNodeGroup", "CPU node group for cluster operators.", factory=SystemNodeGroupConfig
    )
    node_monitoring_agent: bool = setting(
        "nodeMonitoringAgent",
        "The EKS node monitoring agent add-on: GPU (XID, DCGM), EFA, kubelet and storage faults become node "
        "conditions that node auto repair acts on.",
        True,
    )
    fence_hung_nodes_after_seconds: int = setting(
        "fenceHungNodesAfterSeconds",
        "A GPU node not Ready this long (60-3600 s; 0: off) while a job's pod is stuck Terminating on it is "
        "fenced: its Auto Scaling group replaces the instance and the node is tainted out-of-service, so "
        "the gang restarts on other nodes instead of waiting for node repair (30 min). Needs the stack's "
        "image (image.builder codebuild or docker).",
        180,
    )
    gpu_metrics: bool = setting(
        "gpuMetrics",
        "The CloudWatch observability add-on (Container Insights, DCGM exporter on GPU nodes): GPU and EFA "
        "metrics in CloudWatch.",
        False,
    )


def check_cluster(c: ClusterConfig, r: Reader) -> None:
    k = f"{PROJECT}:cluster"
    fence = c.fence_hung_nodes_after_seconds
    if fence != 0 and not 60 <= fence <= 3600:
        r.problem(f"{k}.fenceHungNodesAfterSeconds", fence, "out of range", "0 (off) or 60-3600")
    if not (c.endpoint_public_access or c.endpoint_private_access):
        r.problem(
            f"{k}.endpointPrivateAccess",
            False,
            "the API endpoint would be unreachable",
            "true, or endpointPublicAccess true",
        )
    if c.endpoint_public_access and not c.public_access_cidrs:
        r.problem(
            f"{k}.publicAccessCidrs",
            [],
            "a public endpoint needs the networks allowed to reach it",
            "the egress CIDRs of the machines that run `pulumi up` (your network, CI runners), "
            "or endpointPublicAccess: false (the private endpoint, from inside the VPC)",
        )
    for i, cidr in enumerate(c.public_access_cidrs):
        try:
            net = ipaddress.IPv4Network(cidr)
        except ValueError:
            r.problem(
                f"{k}.publicAccessCidrs[{i}]", cidr, "not an IPv4 CIDR", "a CIDR such as 203.0.113.0/24"
            )
            continue
        if net.prefixlen == 0:
            r.problem(
                f"{k}.publicAccessCidrs[{i}]",
                cidr,
                "opens the cluster API to the whole internet",
                "the egress CIDRs of the machines that run `pulumi up`, or endpointPublicAccess: false",
            )
    for i, arn in enumerate(c.admin_principals):
        if not _PRINCIPAL.fullmatch(arn):
            r.problem(
                f"{k}.adminPrincipals[{i}]",
                arn,
                "not an IAM role or user ARN",
                "arn:aws:iam::<account>:role/<name>",
            )
    for arn, n in Counter(c.admin_principals).items():
        if n > 1:  # EKS allows one access entry per principal
            r.problem(f"{k}.adminPrincipals", arn, f"listed {n} times", "each principal once")
    if c.control_plane_log_retention_days not in LOG_RETENTION_CHOICES:
        r.problem(
            f"{k}.controlPlaneLogRetentionDays",
            c.control_plane_log_retention_days,
            "not a retention CloudWatch offers",
            ", ".join(map(str, LOG_RETENTION_CHOICES)),
        )
    _check_system_node_group(c.system_node_group, f"{k}.systemNodeGroup", r)


def _check_system_node_group(s: SystemNodeGroupConfig, sk: str, r: Reader) -> None:
    if s.instance_type not in CPU_INSTANCE_TYPES:
        r.problem(
            f"{sk}.instanceType",
            s.instance_type,
            "not a CPU instance type in the catalog",
            ", ".join(CPU_INSTANCE_TYPES),
        )
    if not 1 <= s.min_size <= 20:
        r.problem(f"{sk}.minSize", s.min_size, "out of range (operators need a node)", "1-20")
    if not 1 <= s.max_size <= 20:
        r.problem(f"{sk}.maxSize", s.max_size, "out of range", "1-20")
    elif s.min_size > s.max_size:
        r.problem(f"{sk}.maxSize", s.max_size, f"smaller than minSize ({s.min_size})", f"{s.min_size}-20")
    if 1 <= s.min_size <= s.max_size <= 20 and not s.min_size <= s.desired_size <= s.max_size:
        r.problem(
            f"{sk}.desiredSize",
            s.desired_size,
            f"outside minSize ({s.min_size}) and maxSize ({s.max_size})",
            f"{s.min_size}-{s.max_size}",
        )
    if not 20 <= s.disk_size_gib <= 1000:
        r.problem(f"{sk}.diskSizeGiB", s.disk_size_gib, "out of range", "20-1000")


# Values that only ever appear in documentation: RFC 5737 address blocks and the AWS docs' accounts.
DOCUMENTATION_NETWORKS = tuple(
    ipaddress.IPv4Network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")
)
EXAMPLE_ACCOUNTS = ("123456789012", "111122223333", "444455556666", "777788889999")


def cluster_template_values(c: ClusterConfig) -> list[Problem]:
    """Settings a template stack file carries that no real deployment can use."""
    k = f"{PROJECT}:cluster"
    found = []
    if c.endpoint_public_access:
        for i, cidr in enumerate(c.public_access_cidrs):
            net = ipaddress.IPv4Network(cidr, strict=False)
            if any(net.subnet_of(doc) for doc in DOCUMENTATION_NETWORKS):
                found.append(
                    Problem(
                        f"{k}.publicAccessCidrs[{i}]",
                        cidr,
                        "a documentation address range: nothing there can reach the API endpoint, so "
                        "Pulumi could not reach the cluster it creates",
                        "the egress CIDR of the machines that run `pulumi up` (your network, CI runners)",
                    )
                )
    for i, arn in enumerate(c.admin_principals):
        if arn.split(":")[4] in EXAMPLE_ACCOUNTS:
            found.append(
                Problem(
                    f"{k}.adminPrincipals[{i}]",
                    arn,
                    "an example account from the AWS documentation",
                    "an IAM role or user of your account, or remove the entry",
                )
            )
    return found
