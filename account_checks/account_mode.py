"""Whether the stack's AWS account is its environment's own, as `ci.accountMode` says: read from the
account's IAM roles under `/trainstack/`, where every stack puts its roles (domain/names.py
iam_path). An account that holds another stack's roles is shared, whatever the config says, and a
shared account is fenced only as far as tags and paths reach; the plan says what that leaves open.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from account_checks.report import Check, aws_error
from config import PROJECT, StackConfig

# What the CI fence (components/ci_fence.py) cannot keep apart in one account: it reads tags and
# IAM paths, and these carry neither the stack's tag nor a path, or are used by a service on the
# caller's behalf.
UNFENCED_IN_A_SHARED_ACCOUNT = (
    "RDS snapshots and the node groups' EBS volumes and snapshots (no stack tag: another stack's deploy "
    "role can copy and restore them)",
    "KMS keys used through a service (kms:ViaService: EBS, S3)",
    "describe and list calls, which name no resource",
)


def other_stacks(session: Callable[[], Any], stack: str) -> list[str]:
    """The stacks other than `stack` whose roles the account holds under /trainstack/<stack>/."""
    pages = session().client("iam").get_paginator("list_roles").paginate(PathPrefix=f"/{PROJECT}/")
    found = {role["Path"].split("/")[2] for page in pages for role in page["Roles"]}
    return sorted(found - {stack})


def account_mode_check(cfg: StackConfig, account_id: str, session: Callable[[], Any]) -> Check:
    """`perEnvironment` (the default) holds only where no other stack's roles are in the account;
    `shared` is said, and the report names what the fence leaves open."""
    mode = cfg.ci.account_mode
    name = "CI account mode"
    needs = (
        f"an account of {cfg.stack}'s own (ci.accountMode perEnvironment)"
        if mode == "perEnvironment"
        else "stacks kept apart by the CI fence (ci.accountMode shared)"
    )
    try:
        others = other_stacks(session, cfg.stack)
    except Exception as err:
        return Check(
            name,
            needs,
            "not readable",
            f"{PROJECT}:ci.accountMode = {mode}: could not list the account's IAM roles under /{PROJECT}/ "
            f"({aws_error(err)}), so whether another environment's stack deploys here is unknown; let the "
            "role running Pulumi call iam:ListRoles",
        )
    unfenced = "; ".join(UNFENCED_IN_A_SHARED_ACCOUNT)
    stacks = ", ".join(others)
    if mode == "shared":
        return Check(
            name, needs, f"{'stacks ' + stacks if others else 'no other stack yet'}; not fenced: {unfenced}"
        )
    if not others:
        return Check(name, needs, "no other stack's roles")
    return Check(
        name,
        needs,
        f"the roles of {stacks}",
        f"{PROJECT}:ci.accountMode = perEnvironment: account {account_id} also holds the roles of stack(s) "
        f"{stacks} (/{PROJECT}/<stack>/), so it is not {cfg.stack}'s own; deploy {cfg.stack} to an "
        "account of its own, or set ci.accountMode: shared, where the fence keeps the stacks apart but "
        f"for {unfenced}",
    )
