"""Mountpoint's options for the datasets volume: its pods cannot reach the instance metadata (hop
limit 1), so the region and the nodes' bandwidth come from the stack, not from detection."""

from __future__ import annotations

import pytest
from support.plans import plan

from offline.plan import manifest_of

PV = "kubernetes:core/v1:PersistentVolume"
P5 = {"name": "p5", "instanceType": "p5.48xlarge", "nodeCount": 2, "efa": True}
G6 = {"name": "gpu", "instanceType": "g6.xlarge", "nodeCount": 2}


def options(run) -> list[str]:
    return manifest_of(run.one(PV, "datasets-s3-pv"))[1]["spec"]["mountOptions"]


@pytest.mark.parametrize(
    ("jobs", "throughput"),
    [
        ([{"name": "big", "nodeGroup": "p5", "nodes": 2}], "3200"),  # p5: 3200 Gbit/s of network
        (
            [{"name": "big", "nodeGroup": "p5"}, {"name": "small", "nodeGroup": "gpu"}],
            "2",
        ),  # the least (2.5), whole: mount-s3 takes an integer
    ],
)
def test_the_volume_names_its_region_and_the_jobs_nodes_bandwidth(jobs, throughput):
    run = plan(
        "prod",
        **{"aws:region": "us-west-2"},
        gpuNodeGroups=[P5, G6],
        jobs=[{"kind": "PyTorchJob", "wait": "none", **j} for j in jobs],
        storage={"datasetsMount": True},
    )
    assert options(run) == [
        "read-only",
        "prefix datasets/",
        "allow-other",
        "region us-west-2",
        f"maximum-throughput-gbps {throughput}",
    ]


def test_without_a_job_mountpoint_keeps_its_default_throughput():
    run = plan("prod", gpuNodeGroups=[P5], jobs=[], storage={"datasetsMount": True})
    assert options(run)[-1] == "region us-east-1"
