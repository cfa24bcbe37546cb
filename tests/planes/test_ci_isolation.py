"""CI that cannot cross environments: dev's GitHub roles, evaluated against prod's resources in a
shared account, are denied everything; the preview role decrypts and reads nothing; every role
trusts one GitHub environment only. Policies are evaluated by `support.iam_eval` (moto's
evaluator ignores the conditions they rely on: see that module), itself tested first."""

from __future__ import annotations

import json

import pytest
from support.iam_eval import Request, condition_holds, decide, trusts
from support.plans import plan

ACCOUNT = "123456789012"
SECRETS_KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1111-dev"
STATE = "acme-pulumi-state"
BOUNDARY_DEV = f"arn:aws:iam::{ACCOUNT}:policy/trainstack-dev-boundary"
BOUNDARY_PROD = f"arn:aws:iam::{ACCOUNT}:policy/trainstack-prod-boundary"
HOST = "token.actions.githubusercontent.com"


# --- the evaluator itself ---------------------------------------------------------------------


def test_evaluator_missing_keys_follow_aws():
    assert not condition_holds({"StringEquals": {"k": "a"}}, {})
    assert condition_holds({"StringNotEquals": {"k": "a"}}, {})  # negated: an absent key matches
    assert condition_holds({"Null": {"k": "true"}}, {}) and not condition_holds({"Null": {"k": "false"}}, {})
    assert condition_holds({"Null": {"k": "false"}, "StringNotEquals": {"k": "a"}}, {"k": "b"})
    assert not condition_holds({"Null": {"k": "false"}, "StringNotEquals": {"k": "a"}}, {"k": "a"})
    assert condition_holds({"ForAnyValue:StringEquals": {"tags": ["x"]}}, {"tags": ["y", "x"]})
    assert not condition_holds({"ForAnyValue:StringEquals": {"tags": ["x"]}}, {})
    assert condition_holds({"StringLike": {"p": ".pulumi/*"}}, {"p": ".pulumi/stacks"})
    assert condition_holds({"StringEquals": {"k": ["a", "b"]}}, {"k": "b"})  # any one value
    with pytest.raises(ValueError, match="not modelled"):
        condition_holds({"DateGreaterThan": {"k": "x"}}, {"k": "y"})


def test_evaluator_deny_wins_and_the_boundary_intersects():
    admin = {"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
    boundary = {
        "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
            {"Effect": "Deny", "Action": "s3:Delete*", "NotResource": ["arn:aws:s3:::ours/*"]},
        ]
    }
    assert decide([admin], Request("ec2:RunInstances", "*")) == "allow"
    assert decide([admin], Request("ec2:RunInstances", "*"), boundary) == "implicit"
    assert decide([admin], Request("s3:GetObject", "arn:aws:s3:::x/k"), boundary) == "allow"
    assert decide([admin], Request("S3:DeleteObject", "arn:aws:s3:::x/k"), boundary) == "deny"
    assert decide([admin], Request("s3:DeleteObject", "arn:aws:s3:::ours/k"), boundary) == "allow"
    assert decide([], Request("s3:GetObject", "arn:aws:s3:::x/k"), boundary) == "implicit"


# --- the plan ---------------------------------------------------------------------------------


def ci_run(stack: str, **ci):
    return plan(stack, ci={"githubRepository": "acme/train", **ci})


@pytest.fixture(scope="module")
def dev():
    return ci_run("dev", secretsKeyArn=SECRETS_KEY, stateBucket=STATE)


def policies(run) -> dict[str, dict]:
    return {
        p.name.removeprefix("github-actions-"): json.loads(p.inputs["policy"])
        for p in run.by_type("aws:iam/rolePolicy:RolePolicy")
        if p.name.startswith("github-actions-")
    }


def boundary(run) -> dict:
    (policy,) = run.by_type("aws:iam/policy:Policy")
    return json.loads(policy.inputs["policy"])


def github_roles(run) -> dict[str, dict]:
    return {
        r.name.removeprefix("github-actions-"): r.inputs
        for r in run.by_type("aws:iam/role:Role")
        if r.name.startswith("github-actions-")
    }


def as_role(run, use: str, request: Request) -> str:
    return decide([policies(run)[use]], request, boundary(run))


def prod_tags(**extra) -> dict:
    return {"aws:ResourceTag/trainstack:stack": "prod", **extra}


PROD_REQUESTS = [
    # prod's cluster, node groups' instances and network
    Request("eks:DeleteCluster", "arn:aws:eks:us-east-1:123456789012:cluster/trainstack-prod", prod_tags()),
    Request(
        "eks:CreateAccessEntry",
        "arn:aws:eks:us-east-1:123456789012:cluster/trainstack-prod",
        prod_tags(**{"aws:RequestTag/trainstack:stack": "dev", "aws:TagKeys": ["trainstack:stack"]}),
    ),
    Request(
        "ec2:TerminateInstances",
        "arn:aws:ec2:us-east-1:123456789012:instance/i-0prod",
        {"aws:ResourceTag/eks:cluster-name": "trainstack-prod"},  # EKS's tags only, no stack tag
    ),
    Request(
        "autoscaling:SetDesiredCapacity",
        "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:*:autoScalingGroupName/eks-p5",
        {"aws:ResourceTag/eks:cluster-name": "trainstack-prod"},
    ),
    Request("ec2:DeleteVpc", "arn:aws:ec2:us-east-1:123456789012:vpc/vpc-prod", prod_tags()),
    # claiming prod's VPC for dev by retagging it, or creating in prod's name
    Request(
        "ec2:CreateTags",
        "arn:aws:ec2:us-east-1:123456789012:vpc/vpc-prod",
        prod_tags(**{"aws:RequestTag/trainstack:stack": "dev", "aws:TagKeys": ["trainstack:stack"]}),
    ),
    Request(
        "ec2:RunInstances",
        "arn:aws:ec2:us-east-1:123456789012:instance/*",
        {"aws:RequestTag/trainstack:stack": "prod", "aws:TagKeys": ["trainstack:stack"]},
    ),
    # prod's data, keys, parameters and state
    Request("s3:DeleteBucket", "arn:aws:s3:::artifacts-prod", prod_tags()),  # with S3 ABAC on
    Request("kms:Decrypt", f"arn:aws:kms:us-east-1:{ACCOUNT}:key/2222-prod"),  # prod's untagged secrets key
    Request("kms:ScheduleKeyDeletion", f"arn:aws:kms:us-east-1:{ACCOUNT}:key/3333", prod_tags()),
    Request("ssm:GetParameter", f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/trainstack/prod/x", prod_tags()),
    Request("s3:GetObject", f"arn:aws:s3:::{STATE}/.pulumi/stacks/trainstack/prod.json"),
    Request("s3:PutObject", f"arn:aws:s3:::{STATE}/.pulumi/locks/trainstack/prod/lock.json"),
    # prod's roles, and its boundary
    Request("iam:PutRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/training-pods-role-prod", prod_tags()),
    Request("sts:AssumeRole", f"arn:aws:iam::{ACCOUNT}:role/trainstack-prod-github-deploy", prod_tags()),
    Request("iam:CreatePolicyVersion", BOUNDARY_PROD, prod_tags()),
    # escalation out of the fence: a role without the boundary (or with prod's), a user, dev's own CI
    Request(
        "iam:CreateRole",
        f"arn:aws:iam::{ACCOUNT}:role/escape",
        {"aws:RequestTag/trainstack:stack": "dev", "aws:TagKeys": ["trainstack:stack"]},
    ),
    Request(
        "iam:CreateRole", f"arn:aws:iam::{ACCOUNT}:role/escape", {"iam:PermissionsBoundary": BOUNDARY_PROD}
    ),
    Request("iam:DeleteRolePermissionsBoundary", f"arn:aws:iam::{ACCOUNT}:role/eks-node-dev"),
    Request("iam:CreateAccessKey", f"arn:aws:iam::{ACCOUNT}:user/someone"),
    Request(
        "iam:UpdateAssumeRolePolicy",
        f"arn:aws:iam::{ACCOUNT}:role/trainstack-dev-github-deploy",
        {"aws:ResourceTag/trainstack:stack": "dev"},
    ),
    Request("iam:CreatePolicyVersion", BOUNDARY_DEV, {"aws:ResourceTag/trainstack:stack": "dev"}),
]


@pytest.mark.parametrize(
    "request_", PROD_REQUESTS, ids=lambda r: f"{r.action}@{r.resource.rsplit(':', 1)[-1]}"
)
def test_dev_roles_are_denied_prods_resources(dev, request_):
    for use in ("deploy", "preview", "preview-secrets"):
        assert as_role(dev, use, request_) != "allow", use
    # The boundary's explicit deny, not a gap in an allow list; other stacks' state is outside the
    # deploy policy's allow (a shared state bucket cannot be fenced by a deny that spares ours).
    assert as_role(dev, "deploy", request_) == ("implicit" if STATE in request_.resource else "deny")


def test_dev_deploy_still_reaches_its_own_stack(dev):
    ours = {"aws:ResourceTag/trainstack:stack": "dev"}
    create = {"aws:RequestTag/trainstack:stack": "dev", "aws:TagKeys": ["trainstack:stack"]}
    for request in [
        Request("eks:DeleteCluster", "arn:aws:eks:us-east-1:123456789012:cluster/trainstack-dev", ours),
        Request("ec2:CreateVpc", "arn:aws:ec2:us-east-1:123456789012:vpc/*", create),
        Request(
            "ec2:TerminateInstances",
            "arn:aws:ec2:us-east-1:123456789012:instance/i-0dev",
            {"aws:ResourceTag/eks:cluster-name": "trainstack-dev"},
        ),
        Request(
            "iam:CreateRole",
            f"arn:aws:iam::{ACCOUNT}:role/r",
            {**create, "iam:PermissionsBoundary": BOUNDARY_DEV},
        ),
        Request("kms:Decrypt", SECRETS_KEY),
        Request("kms:Decrypt", f"arn:aws:kms:us-east-1:{ACCOUNT}:key/eks", ours),
        Request(
            "kms:Decrypt",
            f"arn:aws:kms:us-east-1:{ACCOUNT}:key/ebs",
            {"kms:ViaService": "ec2.us-east-1.amazonaws.com"},
        ),
        Request("s3:PutObject", f"arn:aws:s3:::{STATE}/.pulumi/stacks/trainstack/dev.json"),
        Request("s3:PutObject", f"arn:aws:s3:::{STATE}/.pulumi/locks/trainstack/dev/l.json"),
    ]:
        assert as_role(dev, "deploy", request) == "allow", request


def test_every_github_role_carries_the_boundary_and_the_boundary_names_itself(dev):
    (policy,) = dev.by_type("aws:iam/policy:Policy")
    assert policy.inputs["name"] == "trainstack-dev-boundary"
    roles = github_roles(dev)
    assert set(roles) == {"preview", "preview-secrets", "deploy"}
    for inputs in roles.values():
        assert inputs["permissionsBoundary"] == BOUNDARY_DEV
    (bounded,) = [s for s in boundary(dev)["Statement"] if s["Sid"] == "RolesCarryTheBoundary"]
    assert bounded["Condition"] == {"StringNotEquals": {"iam:PermissionsBoundary": BOUNDARY_DEV}}
    # no managed admin policy anywhere: the deploy role's power is its inline policy under the boundary
    assert not [
        a for a in dev.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment") if "github" in a.name
    ]


def test_the_preview_role_decrypts_nothing_and_reads_no_state(dev):
    preview = policies(dev)["preview"]
    for statement in preview["Statement"]:
        for action in statement["Action"]:
            assert action.split(":")[1].startswith(("Describe", "Get", "List", "BatchGet")), action
            assert action != "kms:Decrypt" and not action.startswith("s3:GetObject")
    for request in [
        Request("kms:Decrypt", SECRETS_KEY),
        Request("s3:GetObject", f"arn:aws:s3:::{STATE}/.pulumi/stacks/trainstack/dev.json"),
        Request("secretsmanager:GetSecretValue", f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:x"),
    ]:
        assert as_role(dev, "preview", request) != "allow", request
    # the approved preview reads exactly this stack's state and key
    assert as_role(dev, "preview-secrets", Request("kms:Decrypt", SECRETS_KEY)) == "allow"
    state = f"arn:aws:s3:::{STATE}/.pulumi/stacks/trainstack/dev.json"
    assert as_role(dev, "preview-secrets", Request("s3:GetObject", state)) == "allow"
    assert as_role(dev, "preview-secrets", Request("s3:PutObject", state)) == "implicit"


def token(context: str, repo: str = "acme/train") -> dict:
    return {f"{HOST}:aud": "sts.amazonaws.com", f"{HOST}:sub": f"repo:{repo}:{context}"}


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_each_role_trusts_its_own_environment_only(stack):
    run = ci_run(stack, secretsKeyArn=SECRETS_KEY)
    trust = {use: json.loads(inputs["assumeRolePolicy"]) for use, inputs in github_roles(run).items()}
    own = {"preview": f"{stack}-preview", "preview-secrets": f"{stack}-preview-secrets", "deploy": stack}
    for use, environment in own.items():
        (statement,) = trust[use]["Statement"]
        assert statement["Condition"]["StringEquals"][f"{HOST}:sub"] == [
            f"repo:acme/train:environment:{environment}"
        ]
        for other_use, other in own.items():
            assert trusts(trust[use], token(f"environment:{other}")) == (other_use == use), (use, other)
        for context in (
            "pull_request",
            "ref:refs/heads/main",
            "environment:prod" if stack == "dev" else "environment:dev",
        ):
            assert not trusts(trust[use], token(context)), (use, context)
        assert not trusts(trust[use], token(f"environment:{environment}", repo="acme/fork"))
        assert not trusts(trust[use], {f"{HOST}:sub": f"repo:acme/train:environment:{environment}"})  # no aud


def test_an_explicit_environment_replaces_the_stack_name():
    run = ci_run("dev", environment="sandbox")
    trust = json.loads(github_roles(run)["deploy"]["assumeRolePolicy"])
    assert trusts(trust, token("environment:sandbox")) and not trusts(trust, token("environment:dev"))
    assert "preview-secrets" not in github_roles(run)  # no state or key to read: no such role


def test_with_ci_every_role_the_stack_creates_carries_the_boundary():
    """The fence refuses CreateRole without the boundary: every role a CI `up` creates has it (the
    nodes', CodeBuild's, the autoscaler's, each job's); without CI none does."""
    jobs = [{"name": "train", "kind": "PyTorchJob", "nodeGroup": "gpu"}]
    with_ci = plan("dev", jobs=jobs, ci={"githubRepository": "acme/train"})
    roles = with_ci.by_type("aws:iam/role:Role")
    names = {r.name for r in roles}
    assert {"eks-node", "image-codebuild", "cluster-autoscaler-role", "training-pods-train-role"} <= names
    boundary = f"arn:aws:iam::{ACCOUNT}:policy/trainstack-dev-boundary"
    assert {r.name: r.inputs.get("permissionsBoundary") for r in roles} == {r.name: boundary for r in roles}
    without = plan("dev", jobs=jobs).by_type("aws:iam/role:Role")
    assert [r.name for r in without if "permissionsBoundary" in r.inputs] == []
