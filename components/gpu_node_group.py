"""A GPU (or, with `gpu=False`, CPU) managed node group with its own launch template, and EFA
wiring when asked for. A CPU group's nodes run the standard AMI, carry no GPU taint or GPU labels
(so no NVIDIA device plugin lands on them), and its node-template tags offer no GPUs.

EFA layout follows AWS's current guidance for accelerated instances: the primary ENA interface on
network card 0, device 0; an efa-only interface on card 0, device 1; an efa-only interface at
device 0 on every other card, up to the instance type's maximum EFA interfaces. All nodes share
one subnet (one AZ) and, optionally, a cluster placement group.

A group the cluster autoscaler sizes sits at `min_nodes` and grows to `node_count` per job. Its Auto
Scaling group carries the autoscaler's discovery tag and the node-template tags (labels, taint,
GPUs, EFA interfaces) it needs to scale from zero, when no node exists to read them from. EKS sizes
a Capacity Block group itself, to the block; the autoscaler never sees it.

Checkpoints go to a pod's emptyDir, under /var/lib/kubelet. On a type with NVMe instance store the
AMI's own local-storage setting (nodeadm `localStorage.strategy: RAID0`) puts that directory on a
RAID0 array over the disks; without one, the root gp3 volume gets the throughput and IOPS to write
them (domain/disks.py).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from components.cluster import NODE_METADATA_OPTIONS, Cluster
from components.shared_storage import lustre_client_script
from conventions import (
    ACCELERATOR_LABEL,
    AWS_GPU_LABEL,
    EFA_LABEL,
    EFA_RESOURCE,
    GPU_PRESENT_LABEL,
    GPU_RESOURCE,
    GPU_TAINT,
    HEALTH_MODE_LABEL,
    HEALTH_STARTUP_TAINT,
    INSTANCE_TYPE_LABEL,
    NODE_GROUP_LABEL,
    NODE_TEMPLATE_TAG,
    autoscaler_discovery_tags,
)
from domain import names
from domain.catalog import InstanceType
from domain.disks import CHECKPOINT_GP3_IOPS, CHECKPOINT_GP3_THROUGHPUT_MIBPS
from domain.node_roles import group_selector


@dataclass(frozen=True)
class GpuNodeGroupArgs:
    group_name: str
    instance_type: str
    # The type's hardware as EC2 described it (config/instance_facts.py asked DescribeInstanceTypes
    # before anything was registered): GPUs, vCPUs, memory, EFA interfaces, instance store.
    instance: InstanceType
    node_count: int  # the most nodes
    min_nodes: int  # the autoscaler never goes below
    autoscaled: bool  # the cluster autoscaler sizes it (else it keeps node_count, or EKS sizes it)
    efa: bool
    capacity_type: str  # ON_DEMAND | SPOT | CAPACITY_BLOCK
    capacity_reservation_id: str | None
    placement_group: bool
    disk_size_gib: int
    cluster: Cluster
    kubernetes_version: str  # with a launch template pulumi-eks does not default it
    subnet_id: pulumi.Input[str]  # one subnet in an AZ that offers the type: one AZ, as EFA needs
    vpc_id: pulumi.Input[str]
    gpu: bool = True  # False: a CPU group (standard AMI, no GPU taint, labels or node-template GPUs)
    lustre_client: bool = False  # its jobs mount FSx for Lustre: install the client on the nodes
    auto_repair: bool = True  # EKS replaces a node the monitoring agent marks unhealthy
    health_mode: str = "off"  # burnIn: nodes join with the health gate's startup taint; passive: watched
    # The root gp3 volume's, where a type has no NVMe instance store and checkpoints land on it.
    disk_throughput_mibps: int = CHECKPOINT_GP3_THROUGHPUT_MIBPS
    disk_iops: int = CHECKPOINT_GP3_IOPS


# nodeadm's NodeConfig (awslabs/amazon-eks-ami `nodeadm/api/v1alpha1/nodeconfig_types.go`,
# LocalStorageOptions): at boot `nodeadm init` runs `setup-local-disks raid0`
# (`nodeadm/internal/system/local_disk.go`), whose script (`templates/al2023/runtime/bin/setup-local-disks`)
# builds one md RAID0 array over every NVMe instance store disk, mounts it at /mnt/k8s-disks/0 and
# bind-mounts /var/lib/kubelet, /var/lib/containerd and /var/log/pods onto it: emptyDirs and image
# layers land on NVMe. nodeadm merges this partial NodeConfig with the one EKS adds (its
# `mime-userdata-merge` e2e case); with no NVMe disk found the script does nothing.
RAID0_NODE_CONFIG = """---
apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  instance:
    localStorage:
      strategy: RAID0
"""
NODE_CONFIG_TYPE = "application/node.eks.aws"
SHELL_SCRIPT_TYPE = 'text/x-shellscript; charset="us-ascii"'


def mime_user_data(parts: list[tuple[str, str]]) -> str:
    """MIME multipart user data of (content type, body) parts, the form an EKS managed node group
    merges with its own NodeConfig (EKS user guide, launch-templates). A fixed boundary keeps the
    template, and so the nodes, unchanged from one `pulumi up` to the next."""
    body = "".join(f"--//\nContent-Type: {kind}\n\n{text}\n" for kind, text in parts)
    return f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="//"\n\n{body}--//--\n'


def root_volume(args: GpuNodeGroupArgs, local_nvme: bool) -> dict:
    """The root gp3 volume; provisioned for checkpoint writes only where they land on it (more
    than gp3's 125 MiB/s baseline is paid for by the month)."""
    ebs = {
        "volume_size": args.disk_size_gib,
        "volume_type": "gp3",
        "encrypted": "true",
        "delete_on_termination": "true",
    }
    if not local_nvme:
        ebs |= {"throughput": args.disk_throughput_mibps, "iops": args.disk_iops}
    return {"device_name": "/dev/xvda", "ebs": ebs}


def efa_network_interfaces(efa_count: int, security_group_ids: list[pulumi.Input[str]]) -> list[dict]:
    """Launch template interfaces for `efa_count` EFA interfaces (efa_count >= 1)."""
    common = {"security_groups": security_group_ids, "delete_on_termination": "true"}
    interfaces = [
        {"network_card_index": 0, "device_index": 0, "interface_type": "interface", **common},
        {"network_card_index": 0, "device_index": 1, "interface_type": "efa-only", **common},
    ]
    interfaces += [
        {"network_card_index": card, "device_index": 0, "interface_type": "efa-only", **common}
        for card in range(1, efa_count)
    ]
    return interfaces


def scaling_config(args: GpuNodeGroupArgs) -> dict[str, int]:
    """An autoscaled group starts at its floor; the autoscaler owns its desired size from then on. A
    Capacity Block group may sit at zero outside its block, and EKS sizes it to the block. Without
    the autoscaler a group keeps all its nodes."""
    if args.autoscaled:
        return {"min_size": args.min_nodes, "desired_size": args.min_nodes, "max_size": args.node_count}
    minimum = 0 if args.capacity_type == "CAPACITY_BLOCK" else args.node_count
    return {"min_size": minimum, "desired_size": args.node_count, "max_size": args.node_count}


# EKS managed node group AMI types (pulumi_eks `AmiType`, EKS API `Nodegroup.amiType`): the NVIDIA
# one ships the driver and container toolkit; the standard one is for the CPU groups (x86: the
# catalog holds no Graviton type).
GPU_AMI_TYPE = "AL2023_x86_64_NVIDIA"
CPU_AMI_TYPE = "AL2023_x86_64_STANDARD"


def cpu_labels(args: GpuNodeGroupArgs) -> dict[str, str]:
    return {**group_selector(args.group_name, gpu=False), INSTANCE_TYPE_LABEL: args.instance_type}


def gpu_labels(args: GpuNodeGroupArgs, gpu_model: str) -> dict[str, str]:
    labels = {
        **group_selector(args.group_name, gpu=True),
        INSTANCE_TYPE_LABEL: args.instance_type,
        ACCELERATOR_LABEL: f"nvidia-{gpu_model.lower()}",
        # The autoscaler's AWS provider knows a GPU node by this label: it waits for the device
        # plugin on a new node instead of scaling up again.
        AWS_GPU_LABEL: f"nvidia-{gpu_model.lower()}",
        GPU_PRESENT_LABEL: "true",
    }
    if args.efa:
        labels[EFA_LABEL] = "true"
    if args.health_mode != "off":
        labels[HEALTH_MODE_LABEL] = args.health_mode
    return labels


def node_taints(args: GpuNodeGroupArgs) -> list[dict] | None:
    """A GPU node repels what does not ask for GPUs; a burnt-in group's new node also everything
    but the gate's burn-in until it passed. The startup taint stays out of the node-template tags:
    the autoscaler drops such taints from its templates anyway, and would otherwise think a new
    node never fits the jobs it scales up for."""
    if not args.gpu:
        return None
    return [GPU_TAINT, HEALTH_STARTUP_TAINT] if args.health_mode == "burnIn" else [GPU_TAINT]


def node_repair_config(max_nodes: int) -> dict:
    """One node at a time, and none when more than half the group is unhealthy (a systemic fault,
    such as a bad AMI or an AZ event, is a person's to look at, not a reason to churn every node).
    EKS stops repairing *above* the threshold, so a count of half the group (at least 1) repairs a
    one-node group's only node, which a 50% threshold never does (1 of 1 is 100%)."""
    return {
        "enabled": True,
        "maxParallelNodesRepairedCount": 1,
        "maxUnhealthyNodeThresholdCount": max(1, max_nodes // 2),
    }


def node_repair(max_nodes: int) -> pulumi.ResourceTransform:
    """Resource transform: node auto repair on the node group pulumi-eks creates (its Python SDK has
    no argument for it; EKS's NodeGroup takes `nodeRepairConfig`)."""

    def with_node_repair(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ != "aws:eks/nodeGroup:NodeGroup":
            return None
        return pulumi.ResourceTransformResult(
            props={**args.props, "nodeRepairConfig": node_repair_config(max_nodes)}, opts=args.opts
        )

    return with_node_repair


def node_template_tags(cluster_name: str, labels: dict[str, str], gpus: int, efa: int) -> dict[str, str]:
    """The Auto Scaling group tags the autoscaler scales a group from zero by (its AWS README):
    discovery, then what a node would carry. EKS does not copy node group labels or taints to them.
    A CPU group (`gpus` 0) carries no GPU taint and offers no GPUs; its CPU and memory the
    autoscaler reads from EC2 (DescribeInstanceTypes) by the group's instance type."""
    tags = {autoscaler_discovery_tags(cluster_name)[1]: "true"}
    tags |= {f"{NODE_TEMPLATE_TAG}/label/{k}": v for k, v in labels.items()}
    if gpus:
        tags[f"{NODE_TEMPLATE_TAG}/taint/{GPU_TAINT['key']}"] = f"{GPU_TAINT['value']}:NoSchedule"
        tags[f"{NODE_TEMPLATE_TAG}/resources/{GPU_RESOURCE}"] = str(gpus)
    if efa:
        tags[f"{NODE_TEMPLATE_TAG}/resources/{EFA_RESOURCE}"] = str(efa)
    return tags


class GpuNodeGroup(pulumi.ComponentResource):
    def __init__(self, name: str, args: GpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:compute:GpuNodeGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        facts = args.instance
        # A CPU group's job never asks for GPUs, were its type to have any (the config refuses one).
        self.gpu_count = facts.gpus if args.gpu else 0
        self.vcpus = facts.vcpus
        self.memory_gib = facts.memory_gib
        self.efa_count = facts.max_efa_interfaces if args.efa else 0
        self.local_nvme_disks = facts.instance_store_disks
        node_group_name = names.node_group_name(args.cluster.cluster_name, args.group_name)

        template: dict = {
            "name_prefix": f"{node_group_name}-",
            "update_default_version": True,
            "block_device_mappings": [root_volume(args, self.local_nvme_disks > 0)],
            "metadata_options": NODE_METADATA_OPTIONS,
            "tag_specifications": [
                {
                    "resource_type": "instance",
                    "tags": {"Name": node_group_name, NODE_GROUP_LABEL: args.group_name},
                }
            ],
        }
        if args.capacity_type == "CAPACITY_BLOCK":
            # Capacity Blocks: the instance type lives in the template, not the node group.
            template["instance_type"] = args.instance_type
            template["instance_market_options"] = {"market_type": "capacity-block"}
        if args.capacity_reservation_id:
            template["capacity_reservation_specification"] = {
                "capacity_reservation_target": {"capacity_reservation_id": args.capacity_reservation_id}
            }

        self.security_group = None
        self.placement_group = None
        if args.efa:
            self.security_group = aws.ec2.SecurityGroup(
                f"{name}-efa",
                description=f"EFA traffic between {node_group_name} nodes",
                vpc_id=args.vpc_id,
                tags={"Name": f"{node_group_name}-efa"},
                opts=child,
            )
            # EFA's OS-bypass traffic needs every protocol, both ways, within the group.
            for rule, direction, suffix in (
                (aws.vpc.SecurityGroupIngressRule, "from", "in"),
                (aws.vpc.SecurityGroupEgressRule, "to", "out"),
            ):
                rule(
                    f"{name}-efa-{suffix}",
                    security_group_id=self.security_group.id,
                    referenced_security_group_id=self.security_group.id,
                    ip_protocol="-1",
                    description=f"EFA: all traffic {direction} the same group",
                    opts=child,
                )
            template["network_interfaces"] = efa_network_interfaces(
                self.efa_count, [args.cluster.cluster_security_group_id, self.security_group.id]
            )
        if args.placement_group:
            self.placement_group = aws.ec2.PlacementGroup(f"{name}-placement", strategy="cluster", opts=child)
            template["placement"] = {"group_name": self.placement_group.name}

        user_data: list[tuple[str, str]] = []
        if self.local_nvme_disks:
            user_data.append((NODE_CONFIG_TYPE, RAID0_NODE_CONFIG))
        if args.lustre_client:
            user_data.append((SHELL_SCRIPT_TYPE, lustre_client_script()))
        if user_data:
            template["user_data"] = base64.b64encode(mime_user_data(user_data).encode()).decode()
        self.launch_template = aws.ec2.LaunchTemplate(f"{name}-lt", **template, opts=child)

        labels = gpu_labels(args, facts.gpu_model) if args.gpu else cpu_labels(args)
        self.node_group = eks.ManagedNodeGroup(
            name,
            cluster=args.cluster.eks,
            node_group_name=node_group_name,
            node_role=args.cluster.node_role,
            ami_type=GPU_AMI_TYPE if args.gpu else CPU_AMI_TYPE,
            capacity_type=args.capacity_type,
            instance_types=None if args.capacity_type == "CAPACITY_BLOCK" else [args.instance_type],
            subnet_ids=[args.subnet_id],
            launch_template={
                "id": self.launch_template.id,
                "version": self.launch_template.latest_version.apply(str),
            },
            # A Kubernetes version change rolls these nodes too (pulumi-eks leaves it unset with a
            # launch template, and EKS would keep the creation-time version forever).
            version=args.kubernetes_version,
            scaling_config=scaling_config(args),
            # The desired size is the autoscaler's (or, for a Capacity Block, EKS's): not drift to
            # undo, or every `pulumi up` would take running jobs' nodes away.
            ignore_scaling_changes=True,
            labels=labels,
            taints=node_taints(args),
            # Only the cluster: GPU nodes join on their own, in parallel with the system nodes.
            opts=pulumi.ResourceOptions(
                parent=self, transforms=[node_repair(args.node_count)] if args.auto_repair else None
            ),
        )
        self.autoscaling_group_name = self.node_group.node_group.apply(
            lambda ng: ng.resources.apply(lambda rs: rs[0].autoscaling_groups[0].name)
        )
        self.autoscaled = args.autoscaled
        if self.autoscaled:
            for key, value in node_template_tags(
                args.cluster.cluster_name, labels, self.gpu_count, self.efa_count
            ).items():
                aws.autoscaling.Tag(
                    f"{name}-asg-tag-{key}",
                    autoscaling_group_name=self.autoscaling_group_name,
                    tag={"key": key, "value": value, "propagate_at_launch": False},
                    opts=child,
                )
        self.group_name = args.group_name
        self.node_group_name = node_group_name
        self.register_outputs(
            {
                "nodeGroupName": node_group_name,
                "gpusPerNode": self.gpu_count,
                "efaInterfacesPerNode": self.efa_count,
            }
        )
