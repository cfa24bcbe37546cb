"""Estimated hourly cost of a stack, from the catalog's on-demand prices: what it costs idle (no job
admitted: the control plane, NAT gateways, system nodes and each GPU group's floor), and what each job
adds while it runs (its nodes beyond that floor: a node the idle total already counts is not counted
again, so a job on the system nodes or within a group's minNodes adds nothing). A group whose price
is unknown (a type the catalog has no price for, and no `hourlyUsd`) is a line that names the key to
set, left out of the total."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from config import StackConfig
from config.cluster import support_status
from config.jobs import JobConfig
from conventions import SYSTEM_GROUP
from domain.catalog import (
    EBS_GP3_GB_MONTH_USD,
    FSX_GB_MONTH_USD,
    HOURS_PER_MONTH,
    INSTANCE_TYPES,
    NAT_GATEWAY_HOURLY_USD,
    RDS_GP3_GB_MONTH_USD,
    RDS_POSTGRES_HOURLY_USD,
)


@dataclass(frozen=True)
class CostLine:
    item: str
    quantity: int
    unit_usd: float | None  # None: bought ahead (Capacity Blocks), or no known price (`price_key`)
    price_key: str | None = None  # no known price: the key that gives one; counted as 0 in the total

    @property
    def unknown(self) -> bool:
        return self.price_key is not None

    @property
    def subtotal(self) -> float:
        return self.quantity * (self.unit_usd or 0.0)

    @property
    def unit(self) -> str:
        """The unit price as the plan prints it."""
        if self.price_key is not None:
            return f"price unknown: set {self.price_key}"
        return "bought as a Capacity Block" if self.unit_usd is None else f"${self.unit_usd:.4f}/h"


def price_key(cfg: StackConfig, group_name: str) -> str:
    """The key that gives a group's node a price."""
    index = next(i for i, g in enumerate(cfg.gpu_node_groups) if g.name == group_name)
    return f"trainstack:gpuNodeGroups[{index}].hourlyUsd"


def nat_gateway_count(cfg: StackConfig) -> int:
    if cfg.network.existing_vpc_id:
        return 0
    return cfg.network.availability_zones if cfg.network.nat_gateways == "onePerAz" else 1


def idle_nodes(cfg: StackConfig, group) -> int:
    """GPU nodes a group keeps with no job: its floor when the autoscaler sizes it, else all."""
    if cfg.autoscaled(group):
        return group.min_nodes
    return group.node_count


@dataclass(frozen=True)
class JobCost:
    """What a job adds to the idle stack while it runs; on a cluster the stack did not create, what
    the owner's nodes it holds cost while it runs."""

    added_nodes: (
        int  # its nodes beyond what the idle stack keeps (and pays for); the nodes it holds on an owner's
    )
    node_hourly_usd: float | None  # one node; 0.0: bought ahead (a Capacity Block); None: unknown
    owners_nodes: bool = False  # a cluster the stack did not create: its nodes are its owner's
    price_key: str | None = None  # the key that gives the node a price, when it has none

    @property
    def hourly_usd(self) -> float | None:
        if not self.added_nodes:
            return 0.0
        return None if self.node_hourly_usd is None else self.added_nodes * self.node_hourly_usd

    @property
    def unknown_price(self) -> str:
        return f"price unknown: set {self.price_key}" if self.price_key else "price unknown"

    def describe(self) -> str:
        if self.owners_nodes:
            if not self.added_nodes:
                return "on the cluster owner's nodes"
            price = self.unknown_price if self.hourly_usd is None else f"${self.hourly_usd:.2f}/h"
            return f"on the cluster owner's nodes ({self.added_nodes} node(s), {price} while it runs)"
        if not self.added_nodes:
            return "adds no node (its nodes are in the idle total)"
        price = self.unknown_price if self.hourly_usd is None else f"+${self.hourly_usd:.2f}/h"
        return f"adds {self.added_nodes} node(s), {price} while it runs"


def job_cost(cfg: StackConfig, job: JobConfig) -> JobCost:
    """The nodes `job` adds to the idle stack and their price: on the system nodes (a fixed group)
    or within a group's idle floor, none. On a cluster the stack did not create, the owner's
    nodes the job holds, at their price (SageMaker's for a HyperPod type, or the group's hourlyUsd)."""
    group = next((g for g in cfg.gpu_node_groups if g.name == job.node_group), None)
    if job.node_group == SYSTEM_GROUP or group is None:
        return JobCost(0, 0.0, owners_nodes=cfg.existing_cluster.named)
    key = None if group.price_known else price_key(cfg, group.name)
    if cfg.existing_cluster.named:
        return JobCost(job.nodes, group.hourly_usd, owners_nodes=True, price_key=key)
    return JobCost(max(0, job.nodes - idle_nodes(cfg, group)), group.hourly_usd, price_key=key)


def hourly_cost(cfg: StackConfig, today: datetime.date) -> list[CostLine]:
    """What the idle stack costs per hour on `today`: the control plane's price follows its
    version's support (extended support is six times standard). On a cluster the stack did not
    create, nothing: the cluster and its nodes are its owner's."""
    if cfg.existing_cluster.named:
        return []
    system = cfg.cluster.system_node_group
    status, control_plane = support_status(cfg.cluster.kubernetes_version, today)
    lines = [
        CostLine(f"EKS control plane {cfg.cluster.kubernetes_version}, {status}", 1, control_plane),
        CostLine("NAT gateway", nat_gateway_count(cfg), NAT_GATEWAY_HOURLY_USD),
        CostLine(
            f"{system.instance_type} (system nodes)",
            system.desired_size,
            INSTANCE_TYPES[system.instance_type].hourly_usd,
        ),
    ]
    fsx = cfg.storage.fsx
    if cfg.fsx_groups:  # billed per GB of capacity, used or not
        per_gib_hour = FSX_GB_MONTH_USD[fsx.throughput_per_tib] / HOURS_PER_MONTH
        lines.append(
            CostLine(
                f"GiB of FSx for Lustre (PERSISTENT_2, {fsx.throughput_per_tib} MB/s/TiB)",
                fsx.storage_capacity_gib,
                per_gib_hour,
            )
        )
    lines += tracking_cost(cfg)
    for g in cfg.gpu_node_groups:
        price = None if g.capacity_type == "CAPACITY_BLOCK" else g.hourly_usd
        lines.append(
            CostLine(
                f"{g.instance_type} (node group {g.name}, {g.capacity_type})",
                idle_nodes(cfg, g),
                price,
                price_key=None if g.price_known else price_key(cfg, g.name),
            )
        )
    return [line for line in lines if line.quantity]


def tracking_cost(cfg: StackConfig) -> list[CostLine]:
    """The MLflow server's database (the server itself runs on the system nodes)."""
    t = cfg.tracking
    if t.mode != "server":
        return []
    db = t.server
    if db.database == "rds":
        return [
            CostLine(
                f"{db.instance_class} (RDS PostgreSQL for MLflow)",
                1,
                RDS_POSTGRES_HOURLY_USD[db.instance_class],
            ),
            CostLine(
                "GiB of RDS gp3 (MLflow's database)", db.storage_gib, RDS_GP3_GB_MONTH_USD / HOURS_PER_MONTH
            ),
        ]
    return [
        CostLine(
            "GiB of EBS gp3 (MLflow's in-cluster PostgreSQL)",
            db.storage_gib,
            EBS_GP3_GB_MONTH_USD / HOURS_PER_MONTH,
        )
    ]


def total(lines: list[CostLine]) -> float:
    """The known part: a line of unknown price adds nothing (`unknown_items` names them)."""
    return round(sum(line.subtotal for line in lines), 4)


def unknown_items(lines: list[CostLine]) -> list[str]:
    return [line.item for line in lines if line.unknown]
