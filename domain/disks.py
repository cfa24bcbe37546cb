"""Where a node writes its checkpoints, and how fast: the NVMe instance store as one RAID0 array
where the type has one, else the root gp3 volume at the throughput the group provisions.

The node side (components/gpu_node_group.py) builds the disk; the goodput model reads the speed."""

from __future__ import annotations

from dataclasses import dataclass

from domain.catalog import InstanceType

# Sustained sequential write of one NVMe instance store disk, GB/s. AWS publishes no such figure
# (its instance store tables give 4 KiB random IOPS only), so this is an assumption, kept
# conservative: p5.48xlarge's published 2,200,000 random write IOPS over 8 disks is already
# ~1.1 GB/s a disk at 4 KiB, and large sequential writes are not slower. The small sizes' single
# disk (g5/g6/g6e.xlarge: 250 GB, a slice of a shared drive) may well write slower than this.
NVME_DISK_WRITE_GB_PER_S = 1.0

# gp3 limits (EC2 API reference, LaunchTemplateEbsBlockDeviceRequest and the EBS volume types
# page): IOPS 3,000-80,000 and at most 500 per GiB of volume; throughput at most 0.25 MiB/s per
# provisioned IOPS. EBS now takes 2,000 MiB/s on a volume, but a launch template through the
# terraform provider pulumi-aws wraps still refuses more than 1,000 (`ec2_launch_template.go`,
# `validation.IntBetween(125, 1000)`; pulumi-aws LaunchTemplateBlockDeviceMappingEbs docs).
GP3_THROUGHPUT_MIBPS = (125, 1000)
GP3_IOPS = (3000, 80_000)
GP3_MIBPS_PER_IOPS = 0.25
GP3_IOPS_PER_GIB = 500

# What a GPU group's root gp3 volume gets when checkpoints land on it: gp3's most throughput and
# the fewest IOPS that allow it, instead of the 125 MiB/s and 3,000 IOPS it gets unset.
CHECKPOINT_GP3_THROUGHPUT_MIBPS = 1000
CHECKPOINT_GP3_IOPS = int(CHECKPOINT_GP3_THROUGHPUT_MIBPS / GP3_MIBPS_PER_IOPS)

MIB = 1024 * 1024


@dataclass(frozen=True)
class CheckpointDisk:
    kind: str  # "nvme-raid0" | "gp3"
    write_gb_per_s: float  # sustained sequential write, GB/s (1e9 bytes)
    description: str  # e.g. "8 x 3800 GB NVMe instance store, RAID0"


def checkpoint_disk(instance: InstanceType, gp3_throughput_mibps: int) -> CheckpointDisk:
    """The disk a pod's emptyDir (the checkpoint volume) lives on for a node of `instance`: the
    AMI's RAID0 over the instance store (kubelet's directory is bind-mounted onto it), else the
    root gp3 volume provisioned at `gp3_throughput_mibps`."""
    if instance.instance_store_disks:
        n, gb = instance.instance_store_disks, instance.instance_store_disk_gb
        return CheckpointDisk(
            "nvme-raid0", n * NVME_DISK_WRITE_GB_PER_S, f"{n} x {gb} GB NVMe instance store, RAID0"
        )
    return CheckpointDisk(
        "gp3", gp3_throughput_mibps * MIB / 1e9, f"gp3 root volume, {gp3_throughput_mibps} MiB/s"
    )
