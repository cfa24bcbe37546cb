"""Account checks: what the stack needs from the AWS account and from the machine running Pulumi,
read before any resource is registered (only the AWS provider, which creates nothing, comes first).

A first `pulumi up` short of a GPU quota, with a subnet in an AZ EKS refuses, pointed at a
reservation that does not fit, or without the `aws` CLI fails after minutes of provisioning with
an AWS error. Here every check records what the stack needs and what the account answered:
`pulumi preview` (and the offline plan) prints the report, and any failed check stops the program
with each problem and its fix. Reads go through the stack's AWS provider where Pulumi has a data
source; capacity reservations and CodeBuild source credentials have none, so boto3 reads them with
the same region and profile.

One module per family: report (the framework), zones (the AZ decision), running_cluster (what an
earlier run created), quotas, reservations, codebuild, account_mode, aws_cli, existing_cluster. This module
composes them, in the order the report lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi

from account_checks.account_mode import role_checks
from account_checks.codebuild import source_credential_check
from account_checks.existing_cluster import existing_cluster_checks
from account_checks.quotas import quota_checks
from account_checks.report import AccountCheckError, Check, conclude
from account_checks.reservations import reservation_checks
from account_checks.running_cluster import (
    Creator,
    RunningCluster,
    group_floor_checks,
    kubernetes_version_check,
    log_group_check,
    read_creator,
    read_running_cluster,
)
from account_checks.zones import ZonePlan, fsx_zone_check, plan_zones
from config import StackConfig

__all__ = [
    "AccountCheckError",
    "AccountFacts",
    "Check",
    "ZonePlan",
    "check_account",
    "check_existing_cluster",
]


@dataclass(frozen=True)
class AccountFacts:
    """What the checks found that the compute plane builds on."""

    zones: ZonePlan  # the VPC's AZs, an existing VPC's subnets by AZ, each GPU group's AZ
    creator: Creator
    running: RunningCluster | None = None  # the stack's cluster, where an earlier run created it


def check_account(
    cfg: StackConfig,
    account_id: str,
    caller_arn: str,
    opts: pulumi.InvokeOptions,
    session: Callable[[], Any],
    aws_cli: Check,
) -> AccountFacts:
    """Run every check; log the report; raise AccountCheckError listing every failed one.
    `session` makes the boto3 session (made only when a check needs it); `aws_cli` is what the
    machine running Pulumi offers (account_checks.world)."""
    running = read_running_cluster(cfg, opts)
    zones, checks = plan_zones(cfg, running, opts)
    if cfg.fsx_groups:
        checks.append(fsx_zone_check(cfg, zones.group_zones))
    creator, found = read_creator(cfg, caller_arn, opts)
    checks.append(found)
    checks.append(kubernetes_version_check(cfg, running))
    checks += group_floor_checks(cfg, running)
    if cfg.cluster.control_plane_logs:
        checks.append(log_group_check(cfg, opts))
    checks += quota_checks(cfg, opts)
    checks += reservation_checks(cfg, session)
    if cfg.image.source_repository or cfg.ci.runner == "codebuild":
        checks.append(source_credential_check(cfg, session))
    if cfg.ci.github_repository:
        checks += role_checks(cfg, account_id, session)
    checks.append(aws_cli)
    conclude(cfg, account_id, checks)
    return AccountFacts(zones, creator, running)


def check_existing_cluster(
    cfg: StackConfig, account_id: str, opts: pulumi.InvokeOptions, session: Callable[[], Any], aws_cli: Check
) -> None:
    """The checks that make sense on an EKS cluster the stack did not create: it exists here, it can
    give the training pods an identity (the Pod Identity agent add-on, which the stack does not
    install on someone else's cluster), the CodeBuild credential, the aws CLI. Quotas, AZs and
    reservations are the cluster owner's."""
    checks = existing_cluster_checks(cfg, account_id, opts)
    if cfg.image.source_repository or cfg.ci.runner == "codebuild":
        checks.append(source_credential_check(cfg, session))
    if cfg.ci.github_repository:
        checks += role_checks(cfg, account_id, session)
    checks.append(aws_cli)
    conclude(cfg, account_id, checks)
