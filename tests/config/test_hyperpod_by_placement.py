"""Whether a job runs on HyperPod's nodes is its group's to say (`GpuNodeGroupConfig.hyperpod`), carried
by the group's placement; the jobs wing asks the placement, never the instance type's name."""

from __future__ import annotations

import dataclasses

from components.jobs.hyperpod import on_hyperpod
from config.node_groups import GpuNodeGroupConfig
from config.placements import catalog_placement


def test_a_hyperpod_groups_placement_carries_it_and_the_overlay_asks_only_the_placement():
    hyperpod = catalog_placement(GpuNodeGroupConfig(name="hp", instance_type="ml.g5.8xlarge"))
    ec2 = catalog_placement(GpuNodeGroupConfig(name="gpu", instance_type="g5.8xlarge"))
    assert (hyperpod.hyperpod, ec2.hyperpod) == (True, False)
    assert on_hyperpod(hyperpod) and not on_hyperpod(ec2)
    # The overlay follows the placement, whatever the type is called.
    assert not on_hyperpod(dataclasses.replace(hyperpod, hyperpod=False))
    assert on_hyperpod(dataclasses.replace(ec2, hyperpod=True))
