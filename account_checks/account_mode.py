"""The account's IAM roles under `/trainstack/`, where every stack puts its roles (domain/names.py
iam_path), read before anything is registered:
- whether the account is the stack's environment's own, as `ci.accountMode` says: one that holds
  another stack's roles is shared, whatever the config says, and a shared account is fenced only as
  far as tags and paths reach; the plan says what that leaves open;
- whether every role in the stack's own path trusts only what the stack makes roles for. IAM has no
  condition key on a new role's trust policy, so the fence lets the deploy role create a role in its
  path that trusts anyone; the boundary bounds what that role may do, not who may become it. This
  check finds such a role at the next run and stops it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from account_checks.report import Check, aws_error
from config import PROJECT, StackConfig
from domain.names import iam_path

# What the CI fence (components/ci_fence.py) cannot keep apart in one account: it reads tags and
# IAM paths, and these carry neither the stack's tag nor a path, or are used by a service on the
# caller's behalf.
UNFENCED_IN_A_SHARED_ACCOUNT = (
    "RDS snapshots and the node groups' EBS volumes and snapshots (no stack tag: another stack's deploy "
    "role can copy and restore them)",
    "KMS keys used through a service (kms:ViaService: EBS, S3)",
    "describe and list calls, which name no resource",
)


# Whom the stack's roles trust (the trust policies of components/ and pulumi-eks's): AWS services by
# their service principals, and GitHub's OIDC provider for the CI roles. Nothing of the stack trusts
# an AWS principal (an account, a user or another role).
TRUSTED_SERVICES = frozenset(
    {
        "codebuild.amazonaws.com",  # the image build, the CI runner
        "ec2.amazonaws.com",  # the node groups
        "eks.amazonaws.com",  # the cluster
        "pods.eks.amazonaws.com",  # EKS Pod Identity: jobs, MLflow, the autoscaler, the CSI drivers
        "scheduler.amazonaws.com",  # the nightly image build
    }
)
GITHUB_OIDC = "oidc-provider/token.actions.githubusercontent.com"


def stack_roles(session: Callable[[], Any]) -> list[dict]:
    """Every role under /trainstack/, with its trust policy (boto3 decodes it)."""
    pages = session().client("iam").get_paginator("list_roles").paginate(PathPrefix=f"/{PROJECT}/")
    return [role for page in pages for role in page["Roles"]]


def foreign_principals(role: dict) -> list[str]:
    """What the role's trust policy lets assume it that no role of the stack trusts."""
    found = []
    for statement in _listed(role.get("AssumeRolePolicyDocument", {}).get("Statement", [])):
        if statement.get("Effect") != "Allow":
            continue
        principal = statement.get("Principal", {})
        if not isinstance(principal, dict):  # "*"
            found.append(str(principal))
            continue
        for kind, values in principal.items():
            for value in _listed(values):
                if kind == "Service" and value in TRUSTED_SERVICES:
                    continue
                if kind == "Federated" and value.endswith(f":{GITHUB_OIDC}"):
                    continue
                found.append(f"{kind} {value}")
    return found


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def trusted_roles_check(cfg: StackConfig, roles: list[dict]) -> Check:
    """Every role in the stack's path trusts only services and GitHub's OIDC provider."""
    path = iam_path(cfg.stack)
    ours = [r for r in roles if r["Path"] == path]
    strays = {r["RoleName"]: found for r in ours if (found := foreign_principals(r))}
    name, needs = "Roles in the stack's path", f"roles under {path} trusting AWS services and GitHub only"
    if not strays:
        return Check(name, needs, f"{len(ours)} role(s), none trusting anything else")
    listed = "; ".join(f"{role} trusts {', '.join(found)}" for role, found in sorted(strays.items()))
    return Check(
        name,
        needs,
        f"{len(strays)} role(s) trusting more",
        f"{listed}: no role of {cfg.stack} trusts that, so someone with its deploy role's access made it "
        f"(CreateRole takes any trust policy); with a person's credentials, delete it (aws iam delete-role "
        f"--role-name <role>, after its policies) or move what needs it out of {path}",
    )


def role_checks(cfg: StackConfig, account_id: str, session: Callable[[], Any]) -> list[Check]:
    """The account mode and the trust of the stack's own roles, from one read of the roles."""
    try:
        roles = stack_roles(session)
    except Exception as err:
        return [
            Check(
                "CI account mode",
                f"the account's IAM roles under /{PROJECT}/",
                "not readable",
                f"{PROJECT}:ci.accountMode = {cfg.ci.account_mode}: could not list the account's IAM roles "
                f"under /{PROJECT}/ ({aws_error(err)}), so whether another environment's stack deploys "
                "here, and whom the stack's roles trust, is unknown; let the role running Pulumi call "
                "iam:ListRoles",
            )
        ]
    return [
        account_mode_check(cfg, account_id, other_stacks(roles, cfg.stack)),
        trusted_roles_check(cfg, roles),
    ]


def other_stacks(roles: list[dict], stack: str) -> list[str]:
    """The stacks besides `stack` whose roles are in the account: a stack's roles are under
    /trainstack/<stack>/; one directly under /trainstack/ is no stack's."""
    return sorted({r["Path"].split("/")[2] for r in roles if r["Path"].count("/") >= 3} - {"", stack})


def account_mode_check(cfg: StackConfig, account_id: str, others: list[str]) -> Check:
    """`perEnvironment` (the default) holds only where no other stack's roles are in the account;
    `shared` is said, and the report names what the fence leaves open."""
    mode = cfg.ci.account_mode
    name = "CI account mode"
    needs = (
        f"an account of {cfg.stack}'s own (ci.accountMode perEnvironment)"
        if mode == "perEnvironment"
        else "stacks kept apart by the CI fence (ci.accountMode shared)"
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
