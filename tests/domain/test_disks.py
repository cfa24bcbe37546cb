"""The checkpoint disk a node of each type writes to, and the instance store facts it is read from.
No Pulumi program runs here."""

from __future__ import annotations

import pytest

from domain.catalog import INSTANCE_TYPES
from domain.disks import (
    CHECKPOINT_GP3_IOPS,
    CHECKPOINT_GP3_THROUGHPUT_MIBPS,
    GP3_MIBPS_PER_IOPS,
    CheckpointDisk,
    checkpoint_disk,
)


@pytest.mark.parametrize(
    ("instance_type", "disks", "disk_gb"),
    [
        ("p5.48xlarge", 8, 3800),
        ("p5e.48xlarge", 8, 3800),
        ("p5en.48xlarge", 8, 3800),
        ("p4d.24xlarge", 8, 1000),
        ("p4de.24xlarge", 8, 1000),
        ("g5.xlarge", 1, 250),
        ("g5.12xlarge", 1, 3800),
        ("g5.48xlarge", 2, 3800),
        ("g6.xlarge", 1, 250),
        ("g6e.xlarge", 1, 250),
        ("g6e.48xlarge", 4, 1900),
        ("trn1.32xlarge", 4, 1900),
        ("m5.large", 0, 0),
        ("m6i.large", 0, 0),
    ],
)
def test_instance_store_of_each_catalog_type(instance_type, disks, disk_gb):
    it = INSTANCE_TYPES[instance_type]
    assert (it.instance_store_disks, it.instance_store_disk_gb) == (disks, disk_gb)
    assert it.instance_store_gb == disks * disk_gb


def test_nvme_types_write_to_a_raid0_of_all_their_disks():
    assert checkpoint_disk(INSTANCE_TYPES["p5.48xlarge"], 1000) == CheckpointDisk(
        "nvme-raid0", 8.0, "8 x 3800 GB NVMe instance store, RAID0"
    )
    # RAID0 stripes across the disks: four disks write four times as fast as one (the model's
    # per-disk figure is an assumption, not measured); gp3's setting plays no part.
    g6e = checkpoint_disk(INSTANCE_TYPES["g6e.48xlarge"], 125)
    single = checkpoint_disk(INSTANCE_TYPES["g6e.xlarge"], 125)
    assert g6e.write_gb_per_s == 4 * single.write_gb_per_s
    assert single.description == "1 x 250 GB NVMe instance store, RAID0"


def test_types_without_instance_store_write_to_gp3_at_its_provisioned_throughput():
    disk = checkpoint_disk(INSTANCE_TYPES["m6i.large"], 1000)
    assert disk.kind == "gp3"
    assert disk.write_gb_per_s == pytest.approx(1.048576)  # MiB/s to GB/s (1e9 bytes)
    assert disk.description == "gp3 root volume, 1000 MiB/s"
    assert checkpoint_disk(INSTANCE_TYPES["m6i.large"], 125).write_gb_per_s == pytest.approx(0.131072)


def test_the_checkpoint_gp3_default_is_within_the_iops_ratio():
    assert (CHECKPOINT_GP3_THROUGHPUT_MIBPS, CHECKPOINT_GP3_IOPS) == (1000, 4000)
    assert CHECKPOINT_GP3_THROUGHPUT_MIBPS <= CHECKPOINT_GP3_IOPS * GP3_MIBPS_PER_IOPS
