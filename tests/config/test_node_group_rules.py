"""The rules of `trainstack:gpuNodeGroups`, each refusal naming its key: instance types and EFA,
capacity types and reservations, AZs, names, sizes."""

from __future__ import annotations

import json

import pytest
from support.compute import ebs_only, efa_group
from support.config_rules import BASE, config_problems, group, problems
from support.plans import plan

from config import parse_config
from config.schema import ConfigError


def test_an_instance_type_outside_the_offline_catalog_names_the_closest_ones():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="g5.9xlarge")])
    assert msg == (
        'trainstack:gpuNodeGroups[0].instanceType = "g5.9xlarge": not in the offline catalog; `pulumi '
        "preview` asks EC2; allowed: an NVIDIA GPU instance type, such as g5.xlarge, g5.8xlarge, g5.4xlarge"
    )


def test_trainium_is_not_a_gpu_node_group():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="trn1.32xlarge")])
    assert msg.startswith(
        'trainstack:gpuNodeGroups[0].instanceType = "trn1.32xlarge": not an NVIDIA GPU instance type '
        "(EC2: 16 GPUs, AWS Trainium); allowed: an NVIDIA GPU instance type (families p6-b300, p6-b200, p5, p5e"
    )


def test_efa_on_an_instance_without_efa():
    (msg,) = problems(gpuNodeGroups=[group(efa=True)])
    assert msg.startswith(
        "trainstack:gpuNodeGroups[0].efa = true: g6.xlarge has no EFA interfaces; allowed: false"
    )
    assert "p5.48xlarge" in msg


def test_capacity_block_needs_a_reservation():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="p5.48xlarge", capacityType="CAPACITY_BLOCK")])
    assert msg.startswith("trainstack:gpuNodeGroups[0].capacityReservationId = null: CAPACITY_BLOCK needs")


def test_bad_reservation_id_and_spot_with_reservation():
    msgs = problems(gpuNodeGroups=[group(capacityType="SPOT", capacityReservationId="cr-123")])
    assert any(
        m.startswith('trainstack:gpuNodeGroups[0].capacityReservationId = "cr-123": not a capacity')
        for m in msgs
    )
    assert any(m.startswith('trainstack:gpuNodeGroups[0].capacityType = "SPOT": Spot capacity') for m in msgs)


def test_placement_group_with_reservation_is_refused():
    (msg,) = problems(
        gpuNodeGroups=[
            group(
                instanceType="p5.48xlarge",
                capacityType="CAPACITY_BLOCK",
                capacityReservationId="cr-0123456789abcdef0",
                availabilityZone="us-east-1c",
                placementGroup=True,
            )
        ]
    )
    assert msg.startswith(
        "trainstack:gpuNodeGroups[0].placementGroup = true: a placement group breaks reservations"
    )


def test_capacity_block_only_instance_needs_capacity_block():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="p5e.48xlarge")])
    assert msg == (
        'trainstack:gpuNodeGroups[0].capacityType = "ON_DEMAND": p5e.48xlarge is sold only as Capacity Blocks; '
        "allowed: CAPACITY_BLOCK"
    )


def test_capacity_type_enum():
    (msg,) = problems(gpuNodeGroups=[group(capacityType="RESERVED")])
    assert msg == (
        'trainstack:gpuNodeGroups[0].capacityType = "RESERVED": not a known value; '
        "allowed: ON_DEMAND | SPOT | CAPACITY_BLOCK"
    )


def test_duplicate_node_group_names():
    msgs = problems(gpuNodeGroups=[group(), group()])
    assert 'trainstack:gpuNodeGroups = "gpu": name used by 2 node groups; allowed: unique names' in msgs


def test_a_reservation_needs_its_availability_zone():
    (msg,) = problems(
        gpuNodeGroups=[
            group(
                instanceType="p5.48xlarge",
                capacityType="CAPACITY_BLOCK",
                capacityReservationId="cr-0123456789abcdef0",
            )
        ]
    )
    assert msg.startswith(
        "trainstack:gpuNodeGroups[0].availabilityZone = null: a capacity reservation or Capacity "
        "Block launches only in its own AZ"
    )


def test_availability_zone_must_be_in_the_stack_region():
    (msg,) = problems(gpuNodeGroups=[group(availabilityZone="us-west-2a")])
    assert msg == (
        'trainstack:gpuNodeGroups[0].availabilityZone = "us-west-2a": not an AZ of the stack\'s region '
        "us-east-1; allowed: an AZ such as us-east-1a"
    )


def test_min_nodes_is_a_floor_within_the_group():
    (msg,) = problems(gpuNodeGroups=[group(nodeCount=2, minNodes=3)])
    assert (
        msg == "trainstack:gpuNodeGroups[0].minNodes = 3: out of range; allowed: 0-2 (the group's nodeCount)"
    )
    (msg,) = problems(gpuNodeGroups=[group(minNodes=-1)])
    assert msg.startswith("trainstack:gpuNodeGroups[0].minNodes = -1: out of range")
    cfg = parse_config(
        "dev", {**BASE, "trainstack:gpuNodeGroups": json.dumps([group(nodeCount=4, minNodes=1)])}
    )
    (g,) = cfg.gpu_node_groups
    assert (g.min_nodes, g.node_count, cfg.autoscaled(g)) == (1, 4, True)


def test_efa_on_g6_xlarge_is_a_config_error():

    with pytest.raises(ConfigError) as err:
        plan("dev", jobs=[], gpuNodeGroups=[efa_group("g6.xlarge")])
    assert "trainstack:gpuNodeGroups[0].efa = true: g6.xlarge has no EFA interfaces" in str(err.value)


def test_a_gpu_group_cannot_be_named_system():
    problems = config_problems(gpuNodeGroups=[{"name": "system", "instanceType": "g6.xlarge"}], jobs=[])
    assert any(p.startswith('trainstack:gpuNodeGroups[0].name = "system": reserved') for p in problems)


def test_root_volume_throughput_and_iops_within_gp3s_limits(monkeypatch):
    ebs_only(monkeypatch, "g6.xlarge")
    (msg,) = problems(gpuNodeGroups=[group(diskThroughputMiBps=2000)])
    assert msg == "trainstack:gpuNodeGroups[0].diskThroughputMiBps = 2000: out of range; allowed: 125-1000"
    (msg,) = problems(gpuNodeGroups=[group(diskIops=2000)])
    assert msg == (
        "trainstack:gpuNodeGroups[0].diskIops = 2000: gp3 takes 3000-80000 IOPS and at most 500 per GiB "
        "(200 GiB here); allowed: 3000-80000"
    )
    (msg,) = problems(gpuNodeGroups=[group(diskSizeGiB=50, diskIops=30000)])
    assert msg.startswith("trainstack:gpuNodeGroups[0].diskIops = 30000: gp3 takes 3000-80000 IOPS")
    assert msg.endswith("(50 GiB here); allowed: 3000-25000")


def test_root_volume_throughput_needs_four_iops_per_mib(monkeypatch):
    ebs_only(monkeypatch, "g6.xlarge")
    # The default 1000 MiB/s with too few IOPS for it.
    (msg,) = problems(gpuNodeGroups=[group(diskIops=3000)])
    assert msg == (
        "trainstack:gpuNodeGroups[0].diskThroughputMiBps = 1000: gp3 allows 0.25 MiB/s per IOPS and "
        "the volume has 3000 IOPS; allowed: 125-750, or diskIops of at least 4000"
    )
    cfg = parse_config(
        "dev",
        {**BASE, "trainstack:gpuNodeGroups": json.dumps([group(diskThroughputMiBps=750, diskIops=3000)])},
    )
    (g,) = cfg.gpu_node_groups
    assert (g.gp3_throughput_mibps, g.gp3_iops) == (750, 3000)
    assert g.checkpoint_disk.description == "gp3 root volume, 750 MiB/s"


def test_root_volume_settings_are_refused_where_checkpoints_go_to_the_instance_store():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="p5.48xlarge", diskIops=4000)])
    assert msg == (
        "trainstack:gpuNodeGroups[0].diskIops = 4000: p5.48xlarge keeps checkpoints on its 8 x 3800 GB "
        "NVMe instance store (RAID0), not the root volume; allowed: unset"
    )
    cfg = parse_config("dev", {**BASE, "trainstack:gpuNodeGroups": json.dumps([group()])})
    (g,) = cfg.gpu_node_groups
    assert g.checkpoint_disk.kind == "nvme-raid0"
