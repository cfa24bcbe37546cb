"""Compute plane under the mock engine, the disks checkpoints land on: a RAID0 array over the NVMe
instance store through the AMI's own NodeConfig where the type has one, else a root gp3 volume
provisioned for the writes."""

from __future__ import annotations

import yaml
from support.compute import LT, ebs_only, user_data_parts
from support.plans import plan


def test_a_p5_group_puts_kubelet_on_a_raid0_of_its_instance_store(prod_plan):
    lt = prod_plan.one(LT, "gpu-p5-lt").inputs
    ((kind, body),) = user_data_parts(lt)
    assert kind == "application/node.eks.aws"  # nodeadm's NodeConfig, merged with the one EKS adds
    config = yaml.safe_load(body)
    assert (config["apiVersion"], config["kind"]) == ("node.eks.aws/v1alpha1", "NodeConfig")
    assert config["spec"] == {"instance": {"localStorage": {"strategy": "RAID0"}}}
    # Checkpoints are on NVMe: the root volume stays at gp3's baseline, not paid up for them.
    ebs = lt["blockDeviceMappings"][0]["ebs"]
    assert ebs["volumeType"] == "gp3" and ebs["volumeSize"] == 1000
    assert "throughput" not in ebs and "iops" not in ebs


def test_a_type_without_instance_store_gets_a_gp3_root_volume_sized_for_checkpoints(monkeypatch):
    ebs_only(monkeypatch, "g6.xlarge")
    lt = plan("dev", jobs=[]).one(LT, "gpu-gpu-lt").inputs
    assert lt["blockDeviceMappings"][0]["ebs"] == {
        "volumeSize": 200,
        "volumeType": "gp3",
        "encrypted": "true",
        "deleteOnTermination": "true",
        "throughput": 1000,  # gp3's 125 MiB/s default would take 2 minutes for a 13 GB checkpoint
        "iops": 4000,  # the fewest IOPS that allow 1000 MiB/s (0.25 MiB/s per IOPS)
    }
    assert "userData" not in lt  # no instance store: no NodeConfig to set up


def test_a_single_instance_store_disk_is_raid0_too(dev_plan):
    """g6.xlarge's one 250 GB disk: the AMI's script builds a one-disk array (mdadm --force), which
    still moves kubelet and containerd off the root volume."""
    ((kind, body),) = user_data_parts(dev_plan.one(LT, "gpu-gpu-lt").inputs)
    assert kind == "application/node.eks.aws"
    assert yaml.safe_load(body)["spec"]["instance"]["localStorage"] == {"strategy": "RAID0"}


def test_a_groups_own_gp3_throughput_and_iops_reach_its_launch_template(monkeypatch):
    ebs_only(monkeypatch, "g6.xlarge")
    group = {"name": "gpu", "instanceType": "g6.xlarge", "diskThroughputMiBps": 750, "diskIops": 6000}
    lt = plan("dev", jobs=[], gpuNodeGroups=[group]).one(LT, "gpu-gpu-lt").inputs
    ebs = lt["blockDeviceMappings"][0]["ebs"]
    assert (ebs["throughput"], ebs["iops"]) == (750, 6000)
