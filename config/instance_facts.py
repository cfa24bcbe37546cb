"""Each configured GPU group's hardware, as EC2 describes it, fetched after the config's shape is
read and before any rule that needs the hardware runs (and so before any resource is registered).

A stack that reaches AWS asks EC2's DescribeInstanceTypes through pulumi-aws's
`aws.ec2.get_instance_type` invoke (so `pulumi preview` asks too); the offline engine answers that
invoke from the catalog (offline/engine/aws_answers.py). A kubeconfig stack uses no AWS: the
catalog answers there. `ml.<type>` (SageMaker HyperPod) is asked as `<type>`: EC2 knows no `ml.`
names. A type EC2 does not sell becomes one config problem, not a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from config.names import PROJECT
from config.node_groups import DescribedGpuNodeGroup, GpuNodeGroupConfig
from config.schema import Reader
from domain.catalog import INSTANCE_TYPES, InstanceType, closest_gpu_types, hardware_type, priced

# EC2's error code for a type it does not sell, in the message pulumi-aws passes on: the
# data source's read returns DescribeInstanceTypes' API error as it is (terraform-provider-aws
# internal/service/ec2/ec2_instance_type_data_source.go `dataSourceInstanceTypeRead` ->
# `findInstanceTypeByName`, wrapped by `tfresource.SingularDataSourceFindError`), and EC2 answers
# "InvalidInstanceType: The following supplied instance types do not exist: [<type>]".
INVALID_INSTANCE_TYPE = "InvalidInstanceType"
# The offline engine's answer for a type its catalog lacks: it cannot say whether EC2 sells it.
NOT_IN_OFFLINE_CATALOG = "not in the offline catalog; `pulumi preview` asks EC2"
# A kubeconfig stack asks no EC2: the catalog is all it knows of a type.
NOT_IN_CATALOG = "not in trainstack's instance catalog, which a kubeconfig stack reads instead of EC2"


class UnknownInstanceType(LookupError):
    """EC2 (or, with no AWS, the catalog) knows no such instance type; the message is what to say."""


Describe = Callable[[str], InstanceType]


def catalog_describe(hardware: str) -> InstanceType:
    """The catalog's answer where EC2 is not asked (offline): a type it lacks may be one EC2 sells."""
    found = INSTANCE_TYPES.get(hardware)
    if found is None:
        raise UnknownInstanceType(NOT_IN_OFFLINE_CATALOG)
    return found


def kubeconfig_describe(hardware: str) -> InstanceType:
    """The catalog's answer on a kubeconfig stack, which has no EC2 to ask."""
    found = INSTANCE_TYPES.get(hardware)
    if found is None:
        raise UnknownInstanceType(NOT_IN_CATALOG)
    return found


def ec2_describe(region: str) -> Describe:
    """DescribeInstanceTypes through pulumi-aws, with the default provider: it reads the same
    aws:region and aws:profile as the stack's explicit provider (parse_config refuses any other
    aws: key), and no resource exists yet to hang an explicit one on."""
    import pulumi_aws as aws

    def describe(hardware: str) -> InstanceType:
        try:
            result = aws.ec2.get_instance_type(instance_type=hardware, region=region)
        except Exception as err:  # the invoke's failure, as the engine words it
            if NOT_IN_OFFLINE_CATALOG in str(err):
                raise UnknownInstanceType(NOT_IN_OFFLINE_CATALOG) from None
            found = re.search(rf"{INVALID_INSTANCE_TYPE}: [^\]]*\]", str(err))
            if found:
                raise UnknownInstanceType(f"not an instance type EC2 sells (EC2: {found.group()})") from None
            raise
        return from_invoke(hardware, result)

    return describe


def from_invoke(hardware: str, r: Any) -> InstanceType:
    """An `aws.ec2.get_instance_type` result (its fields as the provider sets them from
    DescribeInstanceTypes) as an `InstanceType`; the price is the catalog's, added by `priced`."""
    gpus = list(r.gpuses or [])
    # Instance store SSDs: the data source does not say NVMe, but on the Nitro types trainstack runs
    # on an SSD instance store is NVMe, the only kind the AMI's local-storage script uses.
    disks = [d for d in r.instance_disks or [] if d.type == "ssd"]
    return InstanceType(
        name=hardware,
        hourly_usd=None,
        vcpus=int(r.default_vcpus),
        memory_gib=int(r.memory_size) // 1024,
        gpus=sum(int(g.count) for g in gpus),
        gpu_model=gpus[0].name if gpus else None,
        gpu_manufacturer=gpus[0].manufacturer if gpus else None,
        gpu_memory_mib=int(gpus[0].memory_size) if gpus else 0,
        max_efa_interfaces=int(r.efa_maximum_interfaces or 0),
        network_cards=int(r.maximum_network_cards or 1),
        network=r.network_performance or "",
        instance_store_disks=sum(int(d.count) for d in disks),
        instance_store_disk_gb=int(disks[0].size) if disks else 0,
        # Sustained, per card, summed: NetworkPerformance's "Up to 20 Gigabit" is the burst.
        baseline_gbps=sum(float(c.baseline_bandwidth or 0) for c in r.network_cards or []),
    )


def describe_groups(
    groups: tuple[GpuNodeGroupConfig, ...], describe: Describe, r: Reader
) -> tuple[GpuNodeGroupConfig, ...]:
    """The groups with their hardware attached; a type nobody sells is a problem, and that group
    stays undescribed (the rules that need its hardware skip it). One question per type."""
    answers: dict[str, InstanceType | None] = {}
    described = []
    for i, g in enumerate(groups):
        hardware = hardware_type(g.instance_type)
        if hardware not in answers:
            try:
                answers[hardware] = describe(hardware)
            except UnknownInstanceType as err:
                answers[hardware] = None
                _unknown(g.instance_type, f"{PROJECT}:gpuNodeGroups[{i}].instanceType", str(err), r)
        elif answers[hardware] is None:
            _unknown(g.instance_type, f"{PROJECT}:gpuNodeGroups[{i}].instanceType", None, r)
        facts = answers[hardware]
        if facts is None:
            described.append(g)
        else:
            fields = {f: getattr(g, f) for f in g.__dataclass_fields__ if f != "described"}
            described.append(DescribedGpuNodeGroup(**fields, described=priced(facts, g.instance_type)))
    return tuple(described)


def _unknown(name: str, key: str, answer: str | None, r: Reader) -> None:
    close = closest_gpu_types(name)
    r.problem(
        key,
        name,
        answer or "not an instance type EC2 sells",
        "an NVIDIA GPU instance type"
        + (f", such as {', '.join(close)}" if close else " (aws ec2 describe-instance-types)"),
    )
