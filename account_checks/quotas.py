"""EC2 vCPU quotas: what each quota must allow for every node group at its largest, by instance
family and how the nodes are bought, against what the account allows."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from account_checks.report import Check
from config import StackConfig
from domain.catalog import INSTANCE_TYPES, hardware_type


@dataclass(frozen=True)
class Quota:
    code: str
    name: str


# EC2 vCPU quotas (service code ec2) by instance family and how the nodes are bought.
ON_DEMAND_QUOTAS = {
    "standard": Quota("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    "g": Quota("L-DB2E81BA", "Running On-Demand G and VT instances"),
    "p": Quota("L-417A185B", "Running On-Demand P instances"),
}
SPOT_QUOTAS = {
    "standard": Quota("L-34B43A08", "All Standard Spot Instance Requests"),
    "g": Quota("L-3819A6DF", "All G and VT Spot Instance Requests"),
    "p": Quota("L-7212CCBC", "All P Spot Instance Requests"),
}


def quota_family(instance_type: str) -> str:
    family = re.match(r"[a-z]*", hardware_type(instance_type)).group()
    if family.startswith("p"):
        return "p"
    if family.startswith(("g", "vt")):
        return "g"
    return "standard"


def quota_checks(cfg: StackConfig, opts: pulumi.InvokeOptions) -> list[Check]:
    """vCPUs each EC2 quota must allow: every group at its largest. Capacity Blocks and capacity
    reservations are not counted against them."""
    system = cfg.cluster.system_node_group
    # vCPUs per node: the system type from the catalog (config allows only its CPU types), each
    # group's from EC2's answer. Only the families configured are asked for: a CPU-only stack (no
    # groups, or `gpu: false` ones) needs no G or P quota.
    groups = [
        (
            "system",
            system.instance_type,
            INSTANCE_TYPES[system.instance_type].vcpus,
            system.max_size,
            "ON_DEMAND",
        )
    ]
    groups += [
        (g.name, g.instance_type, g.instance.vcpus, g.node_count, g.capacity_type)
        for g in cfg.gpu_node_groups
        if g.capacity_type != "CAPACITY_BLOCK" and not g.capacity_reservation_id
    ]
    needed: dict[Quota, list[tuple[str, str, int, int]]] = {}
    for name, instance_type, per_node, nodes, capacity in groups:
        table = SPOT_QUOTAS if capacity == "SPOT" else ON_DEMAND_QUOTAS
        needed.setdefault(table[quota_family(instance_type)], []).append(
            (name, instance_type, per_node, nodes)
        )
    checks = []
    for quota, users in needed.items():
        vcpus = sum(per_node * n for _, _, per_node, n in users)
        found = aws.servicequotas.get_service_quota(service_code="ec2", quota_code=quota.code, opts=opts)
        value = int(found.value)
        who = ", ".join(f"{name}: {n} x {t} at {per_node} vCPUs" for name, t, per_node, n in users)
        problem = None
        if value < vcpus:
            problem = (
                f"EC2 quota {quota.code} ({quota.name}) in {cfg.region} is {value} vCPUs; the stack needs "
                f"{vcpus} ({who}). Ask for more (P and G requests can take days): aws service-quotas "
                f"request-service-quota-increase --service-code ec2 --quota-code {quota.code} "
                f"--desired-value {vcpus} --region {cfg.region}"
            )
        checks.append(
            Check(f"quota {quota.code} ({quota.name})", f"{vcpus} vCPUs ({who})", f"{value} vCPUs", problem)
        )
    return checks
