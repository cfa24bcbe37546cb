"""Node group config: instance type, size, EFA, how capacity is bought, the preflight.

A group is a GPU group unless it says `gpu: false`: a CPU group, for jobs that train with gloo. Both
kinds are one list (`gpuNodeGroups`), because every plane that reads the groups (zones, quotas,
reservations, queues, placements, jobs, outputs, cost, the CLI) treats them alike: a CPU group
differs only in what its nodes carry (no GPUs, no GPU taint, the standard AMI)."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Literal

from config.health import GroupHealthConfig
from config.names import LABEL, NAME_RULE, PROJECT
from config.schema import Reader, setting
from conventions import SYSTEM_GROUP
from domain.catalog import (
    CPU_INSTANCE_TYPES,
    GPU_INSTANCE_TYPES,
    INSTANCE_TYPES,
    InstanceType,
    catalog_instance,
    hardware_type,
    is_sagemaker_type,
)
from domain.disks import (
    CHECKPOINT_GP3_IOPS,
    CHECKPOINT_GP3_THROUGHPUT_MIBPS,
    GP3_IOPS,
    GP3_IOPS_PER_GIB,
    GP3_MIBPS_PER_IOPS,
    GP3_THROUGHPUT_MIBPS,
    CheckpointDisk,
    checkpoint_disk,
)
from domain.faults import FAULTS_PER_MILLION_GPU_HOURS

# The NVIDIA families the catalog holds, for messages: EC2 sells more, and any of them is taken.
GPU_FAMILIES = tuple(dict.fromkeys(t.partition(".")[0] for t in GPU_INSTANCE_TYPES))
CapacityType = Literal["ON_DEMAND", "SPOT", "CAPACITY_BLOCK"]
MAX_NODE_GROUP_NAME = 32

_ZONE = re.compile(r"[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-[0-9][a-z]")
_RESERVATION = re.compile(r"cr-[0-9a-f]{17}")


@dataclass(frozen=True)
class GpuNodeGroupConfig:
    name: str = setting("name", "Node group name (lowercase, digits, '-'; at most 32).")
    instance_type: str = setting(
        "instanceType",
        "NVIDIA GPU instance type (a CPU type with gpu: false); its GPUs, memory, EFA and disks come from "
        "EC2 (DescribeInstanceTypes). On an existingCluster also a SageMaker HyperPod type "
        "(ml.g5.8xlarge: a g5.8xlarge's hardware).",
    )
    gpu: bool = setting(
        "gpu",
        "false: a CPU group (a CPU instance type, no EFA or preflight); its jobs train with gloo, and "
        "it scales per job like a GPU group, with its own queue.",
        True,
    )
    node_count: int = setting(
        "nodeCount", "Most nodes the group holds (1-64); its jobs' queue quota is sized to it.", 1
    )
    min_nodes: int = setting(
        "minNodes",
        "Nodes kept while no job needs them (0-nodeCount); the cluster autoscaler adds the rest per job. "
        "Ignored with CAPACITY_BLOCK (EKS sizes those to the block).",
        0,
    )
    efa: bool = setting("efa", "Attach EFA interfaces (instance type must support EFA).", False)
    capacity_type: CapacityType = setting("capacityType", "How the nodes are bought.", "ON_DEMAND")
    capacity_reservation_id: str | None = setting(
        "capacityReservationId", "Capacity reservation or Capacity Block id (cr-...).", None
    )
    placement_group: bool = setting(
        "placementGroup", "Put nodes in a cluster placement group (not with a reservation).", False
    )
    disk_size_gib: int = setting("diskSizeGiB", "Root volume size in GiB (50-16384).", 200)
    disk_throughput_mibps: int | None = setting(
        "diskThroughputMiBps",
        "Root gp3 volume throughput in MiB/s (125-1000, at most diskIops / 4), for a type without NVMe "
        f"instance store, where checkpoints land on it (default: {CHECKPOINT_GP3_THROUGHPUT_MIBPS}). "
        "A type with one keeps them on its instance store (RAID0).",
        None,
    )
    disk_iops: int | None = setting(
        "diskIops",
        "Root gp3 volume IOPS (3000-80000, at most 500 per GiB of diskSizeGiB), for a type without NVMe "
        f"instance store (default: {CHECKPOINT_GP3_IOPS}).",
        None,
    )
    preflight: bool | None = setting(
        "preflight",
        "Each job checks its own nodes' GPUs, EFA and all-reduce bandwidth before step 0 (default: on with EFA).",
        None,
    )
    preflight_min_bus_bandwidth: int | None = setting(
        "preflightMinBusBandwidthGBps",
        "The check's floor for all-reduce bus bandwidth (default: half the instance's network, in GB/s).",
        None,
    )
    availability_zone: str | None = setting(
        "availabilityZone",
        "AZ of the group's nodes (required with a reservation); default: a VPC AZ offering the type.",
        None,
    )
    auto_repair: bool = setting(
        "autoRepair",
        "EKS node auto repair: a node the monitoring agent marks unhealthy is replaced (one at a time; "
        "none while more than half the group is unhealthy; a one-node group's node too).",
        True,
    )
    health: GroupHealthConfig = setting(
        "health",
        "The health gate of the group's nodes (a burn-in before they train, a watch while they do).",
        factory=GroupHealthConfig,
    )
    hourly_price: float | None = setting(
        "hourlyUsd",
        "What one node costs an hour in USD (0.01-1000), for a negotiated price or a type whose price the "
        "catalog lacks; default: the catalog's on-demand price (SageMaker's for an `ml.` type).",
        None,
    )
    faults_per_million_gpu_hours: float = setting(
        "faultsPerMillionGpuHours",
        "How often one of the group's GPUs stops a job, per million GPU-hours (0.1-10000), for the plan's "
        "goodput and checkpoint interval; default 20, about what Llama 3's run on 16,384 H100s met (19.7).",
        FAULTS_PER_MILLION_GPU_HOURS,
    )
    node_selector: dict[str, str] | None = setting(
        "nodeSelector",
        "On an existingCluster only (required there): the labels that select this group's nodes.",
        None,
    )

    @property
    def facts(self) -> InstanceType | None:
        """The node's hardware: EC2's answer once load_config attached it (`DescribedGpuNodeGroup`),
        else the catalog's; None for a type neither knows (a config problem of its own)."""
        return catalog_instance(self.instance_type)

    @property
    def hyperpod(self) -> bool:
        """A group of SageMaker HyperPod's: only its instance groups run SageMaker (`ml.`) types. The
        one place the name decides; everything else asks the group or its placement."""
        return is_sagemaker_type(self.instance_type)

    @property
    def instance(self) -> InstanceType:
        facts = self.facts
        if facts is None:
            raise LookupError(f"no facts for instance type {self.instance_type}: the config check refuses it")
        return facts

    @property
    def gp3_throughput_mibps(self) -> int:
        return (
            CHECKPOINT_GP3_THROUGHPUT_MIBPS
            if self.disk_throughput_mibps is None
            else self.disk_throughput_mibps
        )

    @property
    def gp3_iops(self) -> int:
        return CHECKPOINT_GP3_IOPS if self.disk_iops is None else self.disk_iops

    @property
    def checkpoint_disk(self) -> CheckpointDisk:
        return checkpoint_disk(self.instance, self.gp3_throughput_mibps)

    @property
    def hourly_usd(self) -> float | None:
        """What one node costs an hour while it runs: a Capacity Block is paid ahead (0); else the
        group's hourlyUsd, or the catalog's price; None where neither is known."""
        if self.capacity_type == "CAPACITY_BLOCK":
            return 0.0
        return self.hourly_price if self.hourly_price is not None else self.instance.hourly_usd

    @property
    def price_known(self) -> bool:
        return self.hourly_usd is not None

    @property
    def sized_by_eks(self) -> bool:
        """EKS sizes a Capacity Block group to its block; the cluster autoscaler never does."""
        return self.capacity_type == "CAPACITY_BLOCK"

    @property
    def checks_efa(self) -> bool:
        return self.preflight if self.preflight is not None else self.efa

    @property
    def min_bus_bandwidth_gbps(self) -> int:
        return self.preflight_min_bus_bandwidth or max(1, int(self.instance.network_gbps / 8 / 2))


@dataclass(frozen=True)
class DescribedGpuNodeGroup(GpuNodeGroupConfig):
    """A group with its hardware as EC2 described it (config/instance_facts.py attaches it)."""

    described: InstanceType | None = None

    @property
    def facts(self) -> InstanceType | None:
        return self.described


def default_gpu_node_groups() -> tuple[GpuNodeGroupConfig, ...]:
    return (GpuNodeGroupConfig(name="gpu", instance_type="g6.xlarge"),)


# What only a group trainstack creates can have, with the default that means "not set".
CREATED_ONLY = (
    ("minNodes", "min_nodes", 0),
    ("capacityType", "capacity_type", "ON_DEMAND"),
    ("capacityReservationId", "capacity_reservation_id", None),
    ("placementGroup", "placement_group", False),
    ("diskSizeGiB", "disk_size_gib", 200),
    ("diskThroughputMiBps", "disk_throughput_mibps", None),
    ("diskIops", "disk_iops", None),
    ("availabilityZone", "availability_zone", None),
)


def check_node_groups(groups: tuple[GpuNodeGroupConfig, ...], region: str, existing: bool, r: Reader) -> None:
    """`existing`: the groups are described nodes of a cluster trainstack did not create."""
    k = f"{PROJECT}:gpuNodeGroups"
    for i, g in enumerate(groups):
        if existing:
            _check_described_group(g, f"{k}[{i}]", r)
        elif g.node_selector is not None:
            r.problem(
                f"{k}[{i}].nodeSelector",
                g.node_selector,
                "trainstack labels the nodes it creates; a selector is for existingCluster groups",
                "unset",
            )
    for name, n in Counter(g.name for g in groups).items():
        if n > 1:
            r.problem(k, name, f"name used by {n} node groups", "unique names")
    for i, g in enumerate(groups):
        _check_node_group(g, region, existing, f"{k}[{i}]", r)


def _check_node_group(g: GpuNodeGroupConfig, region: str, existing: bool, k: str, r: Reader) -> None:
    if not LABEL.fullmatch(g.name) or len(g.name) > MAX_NODE_GROUP_NAME:
        r.problem(
            f"{k}.name",
            g.name,
            "not a valid node group name",
            f"{NAME_RULE}; at most {MAX_NODE_GROUP_NAME} characters",
        )
    if g.name == SYSTEM_GROUP:
        r.problem(f"{k}.name", g.name, "reserved for the system node group", "any other name")
    if g.preflight_min_bus_bandwidth is not None and not 1 <= g.preflight_min_bus_bandwidth <= 10_000:
        r.problem(
            f"{k}.preflightMinBusBandwidthGBps", g.preflight_min_bus_bandwidth, "out of range", "1-10000 GB/s"
        )
    if not 0.1 <= g.faults_per_million_gpu_hours <= 10_000:
        r.problem(
            f"{k}.faultsPerMillionGpuHours", g.faults_per_million_gpu_hours, "out of range", "0.1-10000"
        )
    if g.hourly_price is not None and not 0.01 <= g.hourly_price <= 1000:
        r.problem(f"{k}.hourlyUsd", g.hourly_price, "out of range", "0.01-1000 (USD per node-hour)")
    if g.preflight and not g.efa:
        r.problem(
            f"{k}.preflight",
            True,
            "the preflight checks EFA and cross-node bandwidth; this group has no EFA",
            "false or unset, or efa: true",
        )
    if not 1 <= g.node_count <= 64:
        r.problem(f"{k}.nodeCount", g.node_count, "out of range", "1-64")
    elif not 0 <= g.min_nodes <= g.node_count:
        r.problem(f"{k}.minNodes", g.min_nodes, "out of range", f"0-{g.node_count} (the group's nodeCount)")
    it = g.facts
    if it is None:  # no such type: reported where its facts were asked for
        return
    if g.hyperpod and not existing:
        r.problem(
            f"{k}.instanceType",
            g.instance_type,
            "a SageMaker HyperPod node type; the EKS node groups trainstack creates take EC2 types",
            f"{hardware_type(g.instance_type)} (the same hardware), or the type on an existingCluster",
        )
        return
    if not g.gpu:
        _check_cpu_group(g, it, k, r)
    elif not it.has_nvidia_gpus:
        r.problem(
            f"{k}.instanceType",
            g.instance_type,
            f"not an NVIDIA GPU instance type (EC2: {it.gpus} GPUs"
            + (f", {it.gpu_manufacturer} {it.gpu_model})" if it.gpus else ")"),
            f"an NVIDIA GPU instance type (families {', '.join(GPU_FAMILIES)}, ...), or gpu: false "
            "for a CPU group",
        )
        return
    elif g.efa and not it.efa_supported:
        efa_types = ", ".join(t for t in GPU_INSTANCE_TYPES if INSTANCE_TYPES[t].efa_supported)
        r.problem(
            f"{k}.efa",
            True,
            f"{g.instance_type} has no EFA interfaces",
            f"false, or an EFA instance type ({efa_types})",
        )
    if g.capacity_type == "CAPACITY_BLOCK" and not g.capacity_reservation_id:
        r.problem(
            f"{k}.capacityReservationId",
            None,
            "CAPACITY_BLOCK needs the Capacity Block's reservation id",
            "cr- followed by 17 hex digits",
        )
    if g.availability_zone is not None and not (
        _ZONE.fullmatch(g.availability_zone) and g.availability_zone[:-1] == region
    ):
        r.problem(
            f"{k}.availabilityZone",
            g.availability_zone,
            f"not an AZ of the stack's region {region}",
            f"an AZ such as {region}a",
        )
    if g.capacity_reservation_id is not None:
        _check_reservation(g, k, r)
    if not it.on_demand and g.capacity_type != "CAPACITY_BLOCK":
        r.problem(
            f"{k}.capacityType",
            g.capacity_type,
            f"{g.instance_type} is sold only as Capacity Blocks",
            "CAPACITY_BLOCK",
        )
    if not 50 <= g.disk_size_gib <= 16384:
        r.problem(f"{k}.diskSizeGiB", g.disk_size_gib, "out of range", "50-16384")
    else:
        _check_root_volume(g, k, r)


def _check_cpu_group(g: GpuNodeGroupConfig, it: InstanceType, k: str, r: Reader) -> None:
    """A CPU group's jobs train with gloo over TCP: EFA (NCCL's transport) has nothing to serve
    there, and GPUs on its nodes would sit idle, never requested."""
    if it.gpus:
        r.problem(
            f"{k}.instanceType",
            g.instance_type,
            f"a gpu: false group's nodes would leave their {it.gpus} GPUs idle",
            f"a CPU instance type ({', '.join(CPU_INSTANCE_TYPES)}, ...), or gpu: true",
        )
    if g.efa:
        r.problem(f"{k}.efa", True, "a CPU group trains with gloo over TCP, without EFA", "false or unset")


def _check_root_volume(g: GpuNodeGroupConfig, k: str, r: Reader) -> None:
    """gp3's own limits, refused here rather than by EC2 at the first node launch."""
    it = g.instance
    if it.instance_store_disks:
        for key, value in (("diskThroughputMiBps", g.disk_throughput_mibps), ("diskIops", g.disk_iops)):
            if value is not None:
                r.problem(
                    f"{k}.{key}",
                    value,
                    f"{g.instance_type} keeps checkpoints on its {it.instance_store_disks} x "
                    f"{it.instance_store_disk_gb} GB NVMe instance store (RAID0), not the root volume",
                    "unset",
                )
        return
    throughput, iops = g.gp3_throughput_mibps, g.gp3_iops
    low, high = GP3_THROUGHPUT_MIBPS
    if not low <= throughput <= high:
        r.problem(f"{k}.diskThroughputMiBps", throughput, "out of range", f"{low}-{high}")
        return
    low, high = GP3_IOPS
    most = min(high, GP3_IOPS_PER_GIB * g.disk_size_gib)
    if not low <= iops <= most:
        r.problem(
            f"{k}.diskIops",
            iops,
            f"gp3 takes {low}-{high} IOPS and at most {GP3_IOPS_PER_GIB} per GiB ({g.disk_size_gib} GiB here)",
            f"{low}-{most}",
        )
    elif throughput > iops * GP3_MIBPS_PER_IOPS:
        r.problem(
            f"{k}.diskThroughputMiBps",
            throughput,
            f"gp3 allows {GP3_MIBPS_PER_IOPS} MiB/s per IOPS and the volume has {iops} IOPS",
            f"{GP3_THROUGHPUT_MIBPS[0]}-{int(iops * GP3_MIBPS_PER_IOPS)}, or diskIops of at least "
            f"{int(throughput / GP3_MIBPS_PER_IOPS)}",
        )


def _check_described_group(g: GpuNodeGroupConfig, k: str, r: Reader) -> None:
    """Nodes someone else made: found by a selector; only what the stack creates is refused."""
    from config.existing import check_selector

    if g.node_selector is None:
        r.problem(
            f"{k}.nodeSelector",
            None,
            "on an existing cluster the stack finds a group's nodes by their labels",
            "a map of node label to value, e.g. {node.kubernetes.io/instance-type: p5.48xlarge}",
        )
    else:
        check_selector(g.node_selector, f"{k}.nodeSelector", r)
    for key, attr, default in CREATED_ONLY:
        value = getattr(g, attr)
        if value != default:
            r.problem(
                f"{k}.{key}", value, "only for node groups trainstack creates", "unset on an existingCluster"
            )


def _check_reservation(g: GpuNodeGroupConfig, k: str, r: Reader) -> None:
    if g.availability_zone is None:
        r.problem(
            f"{k}.availabilityZone",
            None,
            "a capacity reservation or Capacity Block launches only in its own AZ",
            "the reservation's AZ (aws ec2 describe-capacity-reservations --capacity-reservation-ids ...)",
        )
    if not _RESERVATION.fullmatch(g.capacity_reservation_id):
        r.problem(
            f"{k}.capacityReservationId",
            g.capacity_reservation_id,
            "not a capacity reservation id",
            "cr- followed by 17 hex digits",
        )
    if g.capacity_type == "SPOT":
        r.problem(
            f"{k}.capacityType",
            "SPOT",
            "Spot capacity cannot target a reservation",
            "ON_DEMAND or CAPACITY_BLOCK with a reservation",
        )
    if g.placement_group:
        r.problem(
            f"{k}.placementGroup",
            True,
            "a placement group breaks reservations bought without it (InsufficientInstanceCapacity)",
            "false when capacityReservationId is set",
        )
