"""The offline answer to `aws.ec2.get_instance_type`: the catalog's facts under the wire names the
pulumi-aws SDK reads, so the program sees what a live DescribeInstanceTypes would give it."""

from __future__ import annotations

import pulumi_aws as aws

from offline.engine.aws_answers import instance_type_facts


def wire_names(result_type: type) -> set[str]:
    """The camelCase names a pulumi-aws result type reads its properties from."""
    return {
        p.fget._pulumi_name
        for p in vars(result_type).values()
        if isinstance(p, property) and hasattr(p.fget, "_pulumi_name")
    }


def test_p5_instance_store_as_the_provider_returns_it():
    facts = instance_type_facts("p5.48xlarge")
    assert facts["instanceDisks"] == [{"count": 8, "size": 3800, "type": "ssd"}]
    assert facts["totalInstanceStorage"] == 30400
    assert facts["instanceStorageSupported"] is True


def test_an_ebs_only_type_has_no_instance_store():
    facts = instance_type_facts("m6i.large")
    assert (facts["instanceDisks"], facts["totalInstanceStorage"]) == ([], 0)
    assert facts["instanceStorageSupported"] is False


def test_every_answered_fact_is_one_the_sdk_reads():
    facts = instance_type_facts("p5.48xlarge")
    assert set(facts) <= wire_names(aws.ec2.GetInstanceTypeResult)
    (disk,) = facts["instanceDisks"]
    assert set(disk) == wire_names(aws.ec2.outputs.GetInstanceTypeInstanceDiskResult)
