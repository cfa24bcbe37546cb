"""Instance facts for validation, EFA layout, checkpoint disks and cost estimates.

A live run asks EC2 (DescribeInstanceTypes, through `aws.ec2.get_instance_type`) for every
configured type's hardware before any config rule that needs it runs (config/instance_facts.py);
this catalog answers the same question in the offline plan and on a kubeconfig stack (no AWS), and
holds the prices, which EC2 does not give. A type with no price here plans with its price unknown.

Prices: us-east-1, Linux, on-demand, from ../shared/reference/aws-gpu-facts.md where it lists the
type, the other sizes from the file it cites (aws/karpenter-provider-aws
`pkg/providers/pricing/zz_generated.pricing_aws.go`, us-east-1, read at 1d927085, 2026-08).
Hardware (vCPUs, memory, GPUs and their MiB, EFA interfaces, bandwidth, the instance store total) of
every type is as in aws/karpenter-provider-aws `website/content/en/docs/reference/instance-types.md`
(generated from DescribeInstanceTypes, same commit). Instance store layouts (NVMe disks x GB each):
p4d, p4de, g5 and trn1 from the instance store table of AWS's EC2 user guide
(awsdocs/amazon-ec2-user-guide `doc_source/InstanceStorage.md`, archived 2023); the split of the
later p5, p5e, p5en, p6-b200, g6 and g6e totals into disks is the one AWS's product pages give, not
checked against an AWS table here. Network cards are not in that table: a type has at least one per
EFA interface (EC2 puts one EFA on each card), which is the figure used for the newer sizes.

g4dn, gr6 and p6-b300 (hardware and us-east-1 prices) are from the same two karpenter files at the
same commit; gr6f (a fraction of a GPU) is left out.

Sustained network bandwidth (`baseline_gbps`): the baseline, never the burst ("up to 20 Gbps" on
g6e.xlarge is a burst it holds for minutes; it sustains 2.5), from aws/karpenter-provider-aws
`pkg/providers/instancetype/zz_generated.bandwidth.go` (same commit), which its generator
(`hack/code/bandwidth_gen/main.go`) reads from the baseline column of the EC2 instance types'
network specifications (docs.aws.amazon.com/ec2/latest/instancetypes/ac.html). A live run reads
the same figure from DescribeInstanceTypes (NetworkCards' BaselineBandwidthInGbps).

SageMaker HyperPod names its nodes `ml.<EC2 type>`: the hardware is the EC2 type's, the price is
SageMaker's (`SAGEMAKER_HOURLY_USD`): SageMaker AI's us-east-1 on-demand list prices per instance
hour as a public price table read them on 2026-09-27 (found through the code search; AWS's pricing
page itself is out of reach here and ../shared/reference has no SageMaker prices), so indicative:
HyperPod bills per instance hour at SageMaker's rates, not EC2's (ml.p5.48xlarge 63.296 against
p5.48xlarge 55.04). That table has no p5e, p5en, p6 or gr6 `ml.` price; those, and any negotiated
price, are given per group (`gpuNodeGroups[].hourlyUsd`), and the plan names that key until then.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace

SAGEMAKER_PREFIX = "ml."


@dataclass(frozen=True)
class InstanceType:
    name: str
    hourly_usd: float | None  # None: no known price (the plan says "unknown")
    vcpus: int
    memory_gib: int
    gpus: int
    gpu_model: str | None
    gpu_manufacturer: str | None
    gpu_memory_mib: int
    max_efa_interfaces: int
    network_cards: int
    network: str
    instance_store_disks: int = 0  # NVMe instance store disks (0: EBS only)
    instance_store_disk_gb: int = 0  # size of each, GB
    capacity_blocks_only: bool = False  # not sold on demand or as Spot
    baseline_gbps: float = 0.0  # sustained network bandwidth, Gbit/s (0: unknown)

    @property
    def instance_store_gb(self) -> int:
        return self.instance_store_disks * self.instance_store_disk_gb

    @property
    def has_nvidia_gpus(self) -> bool:
        return self.gpu_manufacturer == "NVIDIA" and self.gpus > 0

    @property
    def efa_supported(self) -> bool:
        return self.max_efa_interfaces > 0

    @property
    def on_demand(self) -> bool:
        return not self.capacity_blocks_only

    @property
    def network_gbps(self) -> float:
        """Network bandwidth in Gbit/s: the leading figure of `network` (baseline for burstable);
        0 where EC2's text has no figure."""
        figure = self.network.lower().split()
        if figure[:1] == ["up"]:
            figure = figure[2:]
        try:
            return float(figure[0])
        except (IndexError, ValueError):
            return 0.0


def _t(name, price, vcpus, mem, gpus, model, maker, gpu_mib, efa, cards, network, disks=0, disk_gb=0, **kw):
    return InstanceType(
        name,
        price,
        vcpus,
        mem,
        gpus,
        model,
        maker,
        gpu_mib,
        efa,
        cards,
        network,
        disks,
        disk_gb,
        baseline_gbps=BASELINE_MBPS[name] / 1000,
        **kw,
    )


# Baseline bandwidth in Mbit/s, as karpenter's zz_generated.bandwidth.go writes it (see above).
BASELINE_MBPS = {
    "p6-b300.48xlarge": 6400000,
    "p6-b200.48xlarge": 3200000,
    "p5.48xlarge": 3200000,
    "p5.4xlarge": 100000,
    "p5e.48xlarge": 3200000,
    "p5en.48xlarge": 3200000,
    "p4d.24xlarge": 400000,
    "p4de.24xlarge": 400000,
    "g4dn.xlarge": 5000,
    "g4dn.2xlarge": 10000,
    "g4dn.4xlarge": 20000,
    "g4dn.8xlarge": 50000,
    "g4dn.12xlarge": 50000,
    "g4dn.16xlarge": 50000,
    "g4dn.metal": 100000,
    "g5.xlarge": 2500,
    "g5.2xlarge": 5000,
    "g5.4xlarge": 10000,
    "g5.8xlarge": 25000,
    "g5.12xlarge": 40000,
    "g5.16xlarge": 25000,
    "g5.24xlarge": 50000,
    "g5.48xlarge": 100000,
    "g6.xlarge": 2500,
    "g6.2xlarge": 5000,
    "g6.4xlarge": 10000,
    "g6.8xlarge": 25000,
    "g6.12xlarge": 40000,
    "g6.16xlarge": 25000,
    "g6.24xlarge": 50000,
    "g6.48xlarge": 100000,
    "gr6.4xlarge": 10000,
    "gr6.8xlarge": 25000,
    "g6e.xlarge": 2500,
    "g6e.2xlarge": 5000,
    "g6e.4xlarge": 20000,
    "g6e.8xlarge": 25000,
    "g6e.12xlarge": 100000,
    "g6e.16xlarge": 35000,
    "g6e.24xlarge": 200000,
    "g6e.48xlarge": 400000,
    "trn1.32xlarge": 800000,
    "m5.large": 750,
    "m6i.large": 781,
}


A10G, L4, L40S, H100, H200, A100, T4 = (
    ("A10G", 22888),
    ("L4", 22888),
    ("L40S", 45776),
    ("H100", 81920),
    ("H200", 144384),
    ("A100", 40960),
    ("T4", 16384),
)


def _gpu(name, price, vcpus, mem, gpus, gpu, efa, cards, network, disks, disk_gb, **kw):
    model, mib = gpu
    return _t(name, price, vcpus, mem, gpus, model, "NVIDIA", mib, efa, cards, network, disks, disk_gb, **kw)


INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        _gpu("p6-b300.48xlarge", 142.416, 192, 4096, 8, ("B300", 275040), 16, 16, "6400 Gbps", 8, 3800),
        _gpu("p6-b200.48xlarge", 113.9328, 192, 2048, 8, ("B200", 183359), 8, 8, "3200 Gbps", 8, 3800),
        _gpu("p5.48xlarge", 55.04, 192, 2048, 8, H100, 32, 32, "3200 Gbps", 8, 3800),
        _gpu("p5.4xlarge", 6.88, 16, 256, 1, H100, 1, 1, "100 Gbps", 1, 3800),
        _gpu(
            "p5e.48xlarge", None, 192, 2048, 8, H200, 32, 32, "3200 Gbps", 8, 3800, capacity_blocks_only=True
        ),
        _gpu("p5en.48xlarge", 63.296, 192, 2048, 8, H200, 16, 16, "3200 Gbps", 8, 3800),
        _gpu("p4d.24xlarge", 21.958, 96, 1152, 8, A100, 4, 4, "400 Gbps", 8, 1000),
        _gpu("p4de.24xlarge", 27.447, 96, 1152, 8, ("A100", 81920), 4, 4, "400 Gbps", 8, 1000),
        _gpu("g4dn.xlarge", 0.526, 4, 16, 1, T4, 0, 1, "5 Gbps baseline", 1, 125),
        _gpu("g4dn.2xlarge", 0.752, 8, 32, 1, T4, 0, 1, "10 Gbps baseline", 1, 225),
        _gpu("g4dn.4xlarge", 1.204, 16, 64, 1, T4, 0, 1, "20 Gbps baseline", 1, 225),
        _gpu("g4dn.8xlarge", 2.176, 32, 128, 1, T4, 1, 1, "50 Gbps", 1, 900),
        _gpu("g4dn.12xlarge", 3.912, 48, 192, 4, T4, 1, 1, "50 Gbps", 1, 900),
        _gpu("g4dn.16xlarge", 4.352, 64, 256, 1, T4, 1, 1, "50 Gbps", 1, 900),
        _gpu("g4dn.metal", 7.824, 96, 384, 8, T4, 1, 1, "100 Gbps", 2, 900),
        _gpu("g5.xlarge", 1.006, 4, 16, 1, A10G, 0, 1, "2.5 Gbps baseline", 1, 250),
        _gpu("g5.2xlarge", 1.212, 8, 32, 1, A10G, 0, 1, "5 Gbps baseline", 1, 450),
        _gpu("g5.4xlarge", 1.624, 16, 64, 1, A10G, 0, 1, "10 Gbps baseline", 1, 600),
        _gpu("g5.8xlarge", 2.448, 32, 128, 1, A10G, 1, 1, "25 Gbps", 1, 900),
        _gpu("g5.12xlarge", 5.672, 48, 192, 4, A10G, 1, 1, "40 Gbps", 1, 3800),
        _gpu("g5.16xlarge", 4.096, 64, 256, 1, A10G, 1, 1, "25 Gbps", 1, 1900),
        _gpu("g5.24xlarge", 8.144, 96, 384, 4, A10G, 1, 1, "50 Gbps", 1, 3800),
        _gpu("g5.48xlarge", 16.288, 192, 768, 8, A10G, 1, 1, "100 Gbps", 2, 3800),
        _gpu("g6.xlarge", 0.8048, 4, 16, 1, L4, 0, 1, "2.5 Gbps baseline", 1, 250),
        _gpu("g6.2xlarge", 0.9776, 8, 32, 1, L4, 0, 1, "5 Gbps baseline", 1, 450),
        _gpu("g6.4xlarge", 1.3232, 16, 64, 1, L4, 0, 1, "10 Gbps baseline", 1, 600),
        _gpu("g6.8xlarge", 2.0144, 32, 128, 1, L4, 1, 1, "25 Gbps", 2, 450),
        _gpu("g6.12xlarge", 4.6016, 48, 192, 4, L4, 1, 1, "40 Gbps", 4, 940),
        _gpu("g6.16xlarge", 3.3968, 64, 256, 1, L4, 1, 1, "25 Gbps", 2, 940),
        _gpu("g6.24xlarge", 6.6752, 96, 384, 4, L4, 1, 1, "50 Gbps", 4, 940),
        _gpu("g6.48xlarge", 13.3504, 192, 768, 8, L4, 1, 1, "100 Gbps", 8, 940),
        _gpu("gr6.4xlarge", 1.5392, 16, 128, 1, L4, 0, 1, "10 Gbps baseline", 1, 600),
        _gpu("gr6.8xlarge", 2.4464, 32, 256, 1, L4, 1, 1, "25 Gbps", 1, 900),
        _gpu("g6e.xlarge", 1.861, 4, 32, 1, L40S, 0, 1, "2.5 Gbps baseline", 1, 250),
        _gpu("g6e.2xlarge", 2.24208, 8, 64, 1, L40S, 0, 1, "5 Gbps baseline", 1, 450),
        _gpu("g6e.4xlarge", 3.00424, 16, 128, 1, L40S, 0, 1, "20 Gbps", 1, 600),
        _gpu("g6e.8xlarge", 4.52856, 32, 256, 1, L40S, 1, 1, "25 Gbps", 1, 900),
        _gpu("g6e.12xlarge", 10.49264, 48, 384, 4, L40S, 1, 1, "100 Gbps", 2, 1900),
        _gpu("g6e.16xlarge", 7.57719, 64, 512, 1, L40S, 1, 1, "35 Gbps", 1, 1900),
        _gpu("g6e.24xlarge", 15.06559, 96, 768, 4, L40S, 2, 2, "200 Gbps", 2, 1900),
        _gpu("g6e.48xlarge", 30.131, 192, 1536, 8, L40S, 4, 4, "400 Gbps", 4, 1900),
        _t("trn1.32xlarge", 21.50, 128, 512, 16, "Trainium", "AWS", 32768, 8, 8, "800 Gbps", 4, 1900),
        _t("m5.large", 0.096, 2, 8, 0, None, None, 0, 0, 1, "up to 10 Gbps"),
        _t("m6i.large", 0.096, 2, 8, 0, None, None, 0, 0, 1, "up to 10 Gbps"),
    )
}

GPU_INSTANCE_TYPES = tuple(n for n, t in INSTANCE_TYPES.items() if t.has_nvidia_gpus)
CPU_INSTANCE_TYPES = tuple(n for n, t in INSTANCE_TYPES.items() if t.gpus == 0)


# SageMaker's on-demand price per hour of an `ml.` node, us-east-1 (the module's docstring says whence).
SAGEMAKER_HOURLY_USD = {
    "ml.g4dn.xlarge": 0.7364,
    "ml.g4dn.2xlarge": 0.94,
    "ml.g4dn.4xlarge": 1.505,
    "ml.g4dn.8xlarge": 2.72,
    "ml.g4dn.12xlarge": 4.89,
    "ml.g4dn.16xlarge": 5.44,
    "ml.g5.xlarge": 1.41,
    "ml.g5.2xlarge": 1.52,
    "ml.g5.4xlarge": 2.03,
    "ml.g5.8xlarge": 3.06,
    "ml.g5.12xlarge": 7.09,
    "ml.g5.16xlarge": 5.12,
    "ml.g5.24xlarge": 10.18,
    "ml.g5.48xlarge": 20.36,
    "ml.g6.xlarge": 1.127,
    "ml.g6.2xlarge": 1.222,
    "ml.g6.4xlarge": 1.654,
    "ml.g6.8xlarge": 2.518,
    "ml.g6.12xlarge": 5.752,
    "ml.g6.16xlarge": 4.246,
    "ml.g6.24xlarge": 8.344,
    "ml.g6.48xlarge": 16.688,
    "ml.g6e.xlarge": 2.61,
    "ml.g6e.2xlarge": 2.8,
    "ml.g6e.4xlarge": 3.76,
    "ml.g6e.8xlarge": 5.66,
    "ml.g6e.12xlarge": 13.12,
    "ml.g6e.16xlarge": 9.47,
    "ml.g6e.24xlarge": 18.83,
    "ml.g6e.48xlarge": 37.66,
    "ml.p4d.24xlarge": 25.2513,
    "ml.p4de.24xlarge": 31.5641,
    "ml.p5.4xlarge": 7.912,
    "ml.p5.48xlarge": 63.296,
}


def hardware_type(name: str) -> str:
    """The EC2 type whose hardware a node of `name` has: `ml.g5.8xlarge` is a g5.8xlarge."""
    return name.removeprefix(SAGEMAKER_PREFIX)


def is_sagemaker_type(name: str) -> bool:
    return name.startswith(SAGEMAKER_PREFIX)


def priced(facts: InstanceType, name: str) -> InstanceType:
    """`facts` (EC2's hardware) under the configured name, with the catalog's price for that name
    (SageMaker's for an `ml.` type); a type the catalog has no price for has none."""
    if is_sagemaker_type(name):
        return replace(
            facts, name=name, hourly_usd=SAGEMAKER_HOURLY_USD.get(name), capacity_blocks_only=False
        )
    known = INSTANCE_TYPES.get(name)
    return replace(
        facts,
        name=name,
        hourly_usd=known.hourly_usd if known else None,
        capacity_blocks_only=known.capacity_blocks_only if known else False,
    )


def catalog_instance(name: str) -> InstanceType | None:
    """What the catalog knows of `name` (an EC2 type, or `ml.` and one), priced as above."""
    hardware = INSTANCE_TYPES.get(hardware_type(name))
    return priced(hardware, name) if hardware else None


def closest_gpu_types(name: str, count: int = 3) -> list[str]:
    """The catalog's NVIDIA types nearest to a misspelt `name` (with its `ml.` prefix, if any)."""
    prefix = SAGEMAKER_PREFIX if is_sagemaker_type(name) else ""
    found = difflib.get_close_matches(hardware_type(name), GPU_INSTANCE_TYPES, n=count, cutoff=0.5)
    return [prefix + t for t in found]


# Hourly costs of the managed pieces a stack keeps running (same reference file).
NAT_GATEWAY_HOURLY_USD = 0.045

# FSx for Lustre PERSISTENT_2 SSD, per GB-month of capacity by throughput tier (MB/s/TiB), us-east-1:
# 125 from storage.md's sources; 250/500/1000 are indicative figures it could not confirm.
FSX_GB_MONTH_USD = {125: 0.145, 250: 0.20, 500: 0.29, 1000: 0.53}
HOURS_PER_MONTH = 730

# The MLflow server's PostgreSQL (tracking.server), us-east-1 on-demand, Single-AZ: indicative list
# prices, not in shared/reference. RDS gp3 storage, and EBS gp3 for the in-cluster database.
RDS_POSTGRES_HOURLY_USD = {
    "db.t4g.micro": 0.016,
    "db.t4g.small": 0.032,
    "db.t4g.medium": 0.065,
    "db.m7g.large": 0.168,
}
RDS_GP3_GB_MONTH_USD = 0.115
EBS_GP3_GB_MONTH_USD = 0.08
# S3 Standard, us-east-1, the first 50 TB a month: AWS's list price, not in shared/reference.
S3_STANDARD_GB_MONTH_USD = 0.023

# What a node pulls for the training image, estimated: CUDA and torch with its CUDA libraries
# (compressed, by the base's flavor: the default nvidia/cuda `base` image brings no torch and the
# requirements layer brings torch 2.13 and its nvidia-* wheels, about what a PyTorch runtime base
# weighs; a devel base adds compilers and headers) plus the other layers workload/Dockerfile adds
# (EFA stack, gcc, Ray and the other requirements). The image build prints the real figure (ECR's
# imageSizeInBytes) after each push.
BASE_IMAGE_COMPRESSED_GB = {"runtime": 3.5, "devel": 9.5}
ADDED_LAYERS_COMPRESSED_GB = 1.5
# The VERL image: VERL's vLLM application image (torch, vLLM, flash-attention, the CUDA libraries
# vLLM builds against) plus the same added layers; estimated, Docker Hub's figure is out of reach here.
VERL_BASE_COMPRESSED_GB = 10.0
# A node pulls a 15-20 GB image in 4-6 minutes (aws-gpu-facts.md): ~3.5 GB a minute.
IMAGE_PULL_GB_PER_MINUTE = 3.5


def image_compressed_gb(base_image: str) -> float:
    tag = base_image.partition("@")[0].rsplit(":", 1)[-1]  # a digest pin is not the tag
    flavor = "devel" if "devel" in tag else "runtime"
    return BASE_IMAGE_COMPRESSED_GB[flavor] + ADDED_LAYERS_COMPRESSED_GB


def verl_image_compressed_gb() -> float:
    return VERL_BASE_COMPRESSED_GB + ADDED_LAYERS_COMPRESSED_GB


def image_pull_minutes(image_gb: float) -> float:
    return image_gb / IMAGE_PULL_GB_PER_MINUTE


# Commercial regions with EKS and NVIDIA GPU instances that trainstack is planned for. GPU types
# differ per region and AZ; a live run asks EC2 which AZs offer a group's type. Prices above are
# us-east-1's, so the plan's cost estimate is us-east-1's wherever the stack runs.
SUPPORTED_REGIONS = (
    "us-east-1",
    "us-east-2",
    "us-west-1",
    "us-west-2",
    "ca-central-1",
    "sa-east-1",
    "eu-west-1",
    "eu-west-2",
    "eu-west-3",
    "eu-central-1",
    "eu-north-1",
    "ap-south-1",
    "ap-northeast-1",
    "ap-northeast-2",
    "ap-southeast-1",
    "ap-southeast-2",
)
