"""Instance facts for validation, EFA layout, checkpoint disks and cost estimates.

Figures come from ../shared/reference/aws-gpu-facts.md (us-east-1, Linux, on-demand, mid-2026).
Instance store layouts (NVMe disks x GB each): p4d, p4de, g5 and trn1 from the instance store table
of AWS's EC2 user guide (awsdocs/amazon-ec2-user-guide `doc_source/InstanceStorage.md`, archived
2023). Every type's total matches `karpenter.k8s.aws/instance-local-nvme` in aws/karpenter-provider-aws
`website/content/en/docs/reference/instance-types.md` (generated from DescribeInstanceTypes); the
split of the later p5, p5e, p5en, g6 and g6e totals into disks is the one AWS's product pages give,
not checked against an AWS table here.
The same catalog answers `aws.ec2.get_instance_type` in the offline plan, so the program and the
plan read one source of truth; a live `pulumi up` asks EC2 instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    name: str
    hourly_usd: float | None  # None: not sold on demand (Capacity Blocks only)
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
        return self.hourly_usd is not None

    @property
    def network_gbps(self) -> float:
        """Network bandwidth in Gbit/s: the leading figure of `network` (baseline for burstable)."""
        figure = self.network.split()
        return float(figure[2] if figure[0] == "up" else figure[0])


def _t(name, price, vcpus, mem, gpus, model, maker, gpu_mib, efa, cards, network, disks=0, disk_gb=0):
    return InstanceType(
        name, price, vcpus, mem, gpus, model, maker, gpu_mib, efa, cards, network, disks, disk_gb
    )


INSTANCE_TYPES: dict[str, InstanceType] = {
    t.name: t
    for t in (
        _t("p5.48xlarge", 55.04, 192, 2048, 8, "H100", "NVIDIA", 81920, 32, 32, "3200 Gbps", 8, 3800),
        _t("p5e.48xlarge", None, 192, 2048, 8, "H200", "NVIDIA", 134468, 32, 32, "3200 Gbps", 8, 3800),
        _t("p5en.48xlarge", 63.296, 192, 2048, 8, "H200", "NVIDIA", 134468, 16, 16, "3200 Gbps", 8, 3800),
        _t("p4d.24xlarge", 21.958, 96, 1152, 8, "A100", "NVIDIA", 40960, 4, 4, "400 Gbps", 8, 1000),
        _t("p4de.24xlarge", 27.447, 96, 1152, 8, "A100", "NVIDIA", 81920, 4, 4, "400 Gbps", 8, 1000),
        _t("g5.xlarge", 1.006, 4, 16, 1, "A10G", "NVIDIA", 22888, 0, 1, "2.5 Gbps baseline", 1, 250),
        _t("g5.12xlarge", 5.672, 48, 192, 4, "A10G", "NVIDIA", 22888, 1, 1, "40 Gbps", 1, 3800),
        _t("g5.48xlarge", 16.288, 192, 768, 8, "A10G", "NVIDIA", 22888, 1, 1, "100 Gbps", 2, 3800),
        _t("g6.xlarge", 0.8048, 4, 16, 1, "L4", "NVIDIA", 22888, 0, 1, "2.5 Gbps baseline", 1, 250),
        _t("g6e.xlarge", 1.861, 4, 32, 1, "L40S", "NVIDIA", 45776, 0, 1, "2.5 Gbps baseline", 1, 250),
        _t("g6e.48xlarge", 30.131, 192, 1536, 8, "L40S", "NVIDIA", 45776, 4, 4, "400 Gbps", 4, 1900),
        _t("trn1.32xlarge", 21.50, 128, 512, 16, "Trainium", "AWS", 32768, 8, 8, "800 Gbps", 4, 1900),
        _t("m5.large", 0.096, 2, 8, 0, None, None, 0, 0, 1, "up to 10 Gbps"),
        _t("m6i.large", 0.096, 2, 8, 0, None, None, 0, 0, 1, "up to 10 Gbps"),
    )
}

GPU_INSTANCE_TYPES = tuple(n for n, t in INSTANCE_TYPES.items() if t.has_nvidia_gpus)
CPU_INSTANCE_TYPES = tuple(n for n, t in INSTANCE_TYPES.items() if t.gpus == 0)

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

# What a node pulls for the training image, estimated: CUDA and torch with its CUDA libraries
# (compressed, by the base's flavor: the default nvidia/cuda `base` image brings no torch and the
# requirements layer brings torch 2.13 and its nvidia-* wheels, about what a PyTorch runtime base
# weighs; a devel base adds compilers and headers) plus the other layers workload/Dockerfile adds
# (EFA stack, gcc, Ray and the other requirements). The image build prints the real figure (ECR's
# imageSizeInBytes) after each push.
BASE_IMAGE_COMPRESSED_GB = {"runtime": 3.5, "devel": 9.5}
ADDED_LAYERS_COMPRESSED_GB = 1.5
# A node pulls a 15-20 GB image in 4-6 minutes (aws-gpu-facts.md): ~3.5 GB a minute.
IMAGE_PULL_GB_PER_MINUTE = 3.5


def image_compressed_gb(base_image: str) -> float:
    flavor = "devel" if "devel" in base_image.rsplit(":", 1)[-1] else "runtime"
    return BASE_IMAGE_COMPRESSED_GB[flavor] + ADDED_LAYERS_COMPRESSED_GB


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
