"""CI that cannot cross environments: dev's GitHub roles, evaluated against prod's resources and the
account's own admin roles in a shared account, are denied everything; the preview role decrypts
nothing but its own stack's key and reads no data. Policies are evaluated by `support.iam_eval`
(moto's evaluator ignores the conditions they rely on: see that module), itself tested first."""

from __future__ import annotations

import json

import pytest
from support.iam_eval import Request, condition_holds, decide
from support.plans import ci_config, plan

from components.ci_fence import IAM_WRITE_ACTIONS, SERVICE_LINKED_ROLES

ACCOUNT = "123456789012"
SECRETS_KEY = f"arn:aws:kms:us-east-1:{ACCOUNT}:key/1111-dev"
STATE = "acme-pulumi-state"
BOUNDARY_DEV = f"arn:aws:iam::{ACCOUNT}:policy/trainstack/dev/trainstack-dev-boundary"
BOUNDARY_PROD = f"arn:aws:iam::{ACCOUNT}:policy/trainstack/prod/trainstack-prod-boundary"
DEV_DEPLOY = f"arn:aws:iam::{ACCOUNT}:role/trainstack/dev/trainstack-dev-github-deploy"
PLATFORM_ADMIN = f"arn:aws:iam::{ACCOUNT}:role/PlatformAdmin"  # the prod template's adminPrincipals
ORG_ACCESS = f"arn:aws:iam::{ACCOUNT}:role/OrganizationAccountAccessRole"
ADMIN_POLICY = f"arn:aws:iam::{ACCOUNT}:policy/PlatformAdminAccess"  # customer-managed, untagged
OURS = f"arn:aws:iam::{ACCOUNT}:role/trainstack/dev/eks-node"

# The IAM service authorization reference's write, permissions-management and tagging actions whose
# resource is a role, and those whose resource is a managed policy.
ROLE_WRITES = [
    "iam:AttachRolePolicy",
    "iam:CreateRole",
    "iam:DeleteRole",
    "iam:DeleteRolePermissionsBoundary",
    "iam:DeleteRolePolicy",
    "iam:DeleteServiceLinkedRole",
    "iam:DetachRolePolicy",
    "iam:PassRole",
    "iam:PutRolePermissionsBoundary",
    "iam:PutRolePolicy",
    "iam:TagRole",
    "iam:UntagRole",
    "iam:UpdateAssumeRolePolicy",
    "iam:UpdateRole",
    "iam:UpdateRoleDescription",
]
POLICY_WRITES = [
    "iam:CreatePolicy",
    "iam:CreatePolicyVersion",
    "iam:DeletePolicy",
    "iam:DeletePolicyVersion",
    "iam:SetDefaultPolicyVersion",
    "iam:TagPolicy",
    "iam:UntagPolicy",
]


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
    # ARN operators match part by part: `*` never spans a colon
    assert condition_holds({"ArnLike": {"a": "arn:aws:iam::*:role/x/*"}}, {"a": "arn:aws:iam::1:role/x/y"})
    assert not condition_holds({"ArnLike": {"a": "arn:aws:iam::*"}}, {"a": "arn:aws:iam::1:role/x"})
    assert condition_holds({"ArnNotLike": {"a": "arn:aws:iam::1:role/x"}}, {})  # negated: absent matches
    assert not condition_holds(
        {"ArnNotEquals": {"a": ["arn:aws:iam::1:role/x"]}}, {"a": "arn:aws:iam::1:role/x"}
    )
    with pytest.raises(ValueError, match="not modelled"):
        condition_holds({"DateGreaterThan": {"k": "x"}}, {"k": "y"})
    # Case: key names (tag keys in them too) are found whatever their case; values keep theirs.
    assert condition_holds({"StringEquals": {"aws:RequestTag/a:b": "x"}}, {"aws:requesttag/A:B": "x"})
    assert not condition_holds({"StringEquals": {"k": "x"}}, {"k": "X"})
    assert not condition_holds(
        {"ForAnyValue:StringEquals": {"aws:TagKeys": ["a:b"]}}, {"aws:TagKeys": ["A:b"]}
    )
    assert condition_holds(
        {"ForAnyValue:StringEqualsIgnoreCase": {"aws:TagKeys": ["a:b"]}}, {"aws:TagKeys": ["A:b"]}
    )


def test_evaluator_deny_wins_the_boundary_intersects_and_a_resource_policy_names_principals():
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
    me = {"aws:PrincipalArn": "arn:aws:iam::1:role/me"}
    bucket = {
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::1:role/me"},
                "Action": "s3:GetObject",
                "Resource": "*",
            },
            {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": "*"},
        ]
    }
    assert decide([], Request("s3:GetObject", "arn:aws:s3:::b/k", me), resource=bucket) == "allow"
    assert decide([], Request("s3:GetObject", "arn:aws:s3:::b/k"), resource=bucket) == "implicit"
    assert decide([admin], Request("s3:PutObject", "arn:aws:s3:::b/k", me), resource=bucket) == "deny"


# --- the plan ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev():
    return plan("dev", ci=ci_config(secretsKeyArn=SECRETS_KEY, stateBucket=STATE, accountMode="shared"))


def policies(run) -> dict[str, dict]:
    return {
        p.name.removeprefix("github-actions-"): json.loads(p.inputs["policy"])
        for p in run.by_type("aws:iam/rolePolicy:RolePolicy")
        if p.name.startswith("github-actions-")
    }


def boundary(run) -> dict:
    (policy,) = run.by_type("aws:iam/policy:Policy")
    return json.loads(policy.inputs["policy"])


def as_role(run, use: str, request: Request) -> str:
    """The request as the stack's CI role `use` makes it: its session's principal ARN is the role's."""
    session = {"aws:PrincipalArn": f"arn:aws:iam::{ACCOUNT}:role/trainstack/dev/trainstack-dev-github-{use}"}
    request = Request(request.action, request.resource, {**session, **request.context})
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
    # prod's keys, parameters, state and nightly schedule (schedules carry no tags)
    Request("kms:Decrypt", f"arn:aws:kms:us-east-1:{ACCOUNT}:key/2222-prod"),  # prod's untagged secrets key
    Request("kms:ScheduleKeyDeletion", f"arn:aws:kms:us-east-1:{ACCOUNT}:key/3333", prod_tags()),
    Request("ssm:GetParameter", f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/trainstack/prod/x", prod_tags()),
    Request("s3:GetObject", f"arn:aws:s3:::{STATE}/.pulumi/stacks/trainstack/prod.json"),
    Request("s3:PutObject", f"arn:aws:s3:::{STATE}/.pulumi/locks/trainstack/prod/lock.json"),
    Request(
        "scheduler:UpdateSchedule", f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule/trainstack-prod/nightly"
    ),
    Request("scheduler:DeleteSchedule", f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule/default/nightly"),
    # prod's roles and boundary, under prod's path
    Request(
        "iam:PutRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/trainstack/prod/training-pods-role", prod_tags()
    ),
    Request("sts:AssumeRole", f"arn:aws:iam::{ACCOUNT}:role/trainstack/prod/trainstack-prod-github-deploy"),
    Request("iam:PassRole", f"arn:aws:iam::{ACCOUNT}:role/trainstack/prod/eks-node"),
    Request("iam:CreatePolicyVersion", BOUNDARY_PROD),
    # the account's admin roles, their policies and groups: untagged, outside every stack's path
    Request("iam:UpdateAssumeRolePolicy", PLATFORM_ADMIN),
    Request("sts:AssumeRole", PLATFORM_ADMIN),
    Request("sts:AssumeRole", ORG_ACCESS),
    Request("sts:TagSession", ORG_ACCESS),
    Request("iam:PassRole", PLATFORM_ADMIN),
    Request("iam:CreatePolicyVersion", ADMIN_POLICY),
    Request("iam:SetDefaultPolicyVersion", ADMIN_POLICY),
    Request("iam:AttachGroupPolicy", f"arn:aws:iam::{ACCOUNT}:group/Admins"),
    Request("iam:AddUserToGroup", f"arn:aws:iam::{ACCOUNT}:group/Admins"),
    # every IAM write on a role and a policy outside the path
    *(Request(a, PLATFORM_ADMIN) for a in ROLE_WRITES),
    *(Request(a, ADMIN_POLICY) for a in POLICY_WRITES),
    # escalation out of the fence: a role without the boundary (or with prod's), users, providers,
    # trust edits even in our own path, dev's own CI access, service-linked roles we do not use
    Request(
        "iam:CreateRole",
        f"arn:aws:iam::{ACCOUNT}:role/trainstack/dev/escape",
        {"aws:RequestTag/trainstack:stack": "dev", "aws:TagKeys": ["trainstack:stack"]},
    ),
    Request(
        "iam:CreateRole",
        f"arn:aws:iam::{ACCOUNT}:role/trainstack/dev/e",
        {"iam:PermissionsBoundary": BOUNDARY_PROD},
    ),
    Request("iam:DeleteRolePermissionsBoundary", OURS),
    Request("iam:UpdateAssumeRolePolicy", OURS),
    Request("iam:CreateUser", f"arn:aws:iam::{ACCOUNT}:user/trainstack/dev/someone"),
    Request("iam:CreateAccessKey", f"arn:aws:iam::{ACCOUNT}:user/someone"),
    Request("iam:CreateLoginProfile", f"arn:aws:iam::{ACCOUNT}:user/someone"),
    Request("iam:CreateOpenIDConnectProvider", f"arn:aws:iam::{ACCOUNT}:oidc-provider/evil.example"),
    Request("iam:CreateSAMLProvider", f"arn:aws:iam::{ACCOUNT}:saml-provider/evil"),
    Request("iam:UpdateAssumeRolePolicy", DEV_DEPLOY, {"aws:ResourceTag/trainstack:stack": "dev"}),
    Request("iam:PutRolePolicy", DEV_DEPLOY, {"iam:PermissionsBoundary": BOUNDARY_DEV}),
    Request("iam:CreatePolicyVersion", BOUNDARY_DEV, {"aws:ResourceTag/trainstack:stack": "dev"}),
    Request(
        "iam:CreateServiceLinkedRole",
        f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/ssm.amazonaws.com/AWSServiceRoleForAmazonSSM",
        {"iam:AWSServiceName": "ssm.amazonaws.com"},
    ),
]


@pytest.mark.parametrize(
    "request_", PROD_REQUESTS, ids=lambda r: f"{r.action}@{r.resource.rsplit(':', 1)[-1]}"
)
def test_dev_roles_are_denied_prods_resources_and_the_accounts_admin(dev, request_):
    for use in ("deploy", "preview"):
        assert as_role(dev, use, request_) != "allow", use
    # An explicit deny, not a gap in an allow list; other stacks' state is outside the deploy
    # policy's allow (a shared state bucket cannot be fenced by a deny that spares ours).
    assert as_role(dev, "deploy", request_) == ("implicit" if STATE in request_.resource else "deny")
    # The deploy role's own policy holds the fence too: without the boundary it still denies.
    if STATE not in request_.resource:
        assert decide([policies(dev)["deploy"]], request_) == "deny"


def test_every_iam_write_verb_is_fenced():
    """IAM_WRITE_ACTIONS covers each write listed above by its verb."""
    from support.iam_eval import _wildcard

    for action in [*ROLE_WRITES, *POLICY_WRITES, "iam:AttachGroupPolicy", "iam:AddUserToGroup"]:
        assert any(_wildcard(p, action, ignore_case=True) for p in IAM_WRITE_ACTIONS), action


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
        Request("iam:CreateRole", OURS, {**create, "iam:PermissionsBoundary": BOUNDARY_DEV}),
        Request("iam:PutRolePolicy", OURS, {"iam:PermissionsBoundary": BOUNDARY_DEV}),
        Request("iam:PassRole", OURS),
        Request("iam:TagRole", OURS, ours),
        Request("iam:DeleteRole", OURS, ours),
        Request("iam:CreatePolicy", f"arn:aws:iam::{ACCOUNT}:policy/trainstack/dev/p", create),
        Request("iam:CreatePolicyVersion", f"arn:aws:iam::{ACCOUNT}:policy/trainstack/dev/p", ours),
        Request("iam:AddRoleToInstanceProfile", f"arn:aws:iam::{ACCOUNT}:instance-profile/trainstack/dev/n"),
        *(
            Request(
                "iam:CreateServiceLinkedRole",
                f"arn:aws:iam::{ACCOUNT}:role/aws-service-role/{s}/AWSServiceRole",
                {"iam:AWSServiceName": s},
            )
            for s in SERVICE_LINKED_ROLES
        ),
        Request(
            "scheduler:CreateSchedule",
            f"arn:aws:scheduler:us-east-1:{ACCOUNT}:schedule/trainstack-dev/nightly",
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


def test_every_github_role_and_policy_lives_in_the_path_and_carries_the_boundary(dev):
    (policy,) = dev.by_type("aws:iam/policy:Policy")
    assert (policy.inputs["name"], policy.inputs["path"]) == ("trainstack-dev-boundary", "/trainstack/dev/")
    roles = {r.name: r.inputs for r in dev.by_type("aws:iam/role:Role")}
    assert {"github-actions-preview", "github-actions-deploy"} <= set(roles)
    for name, inputs in roles.items():
        assert inputs["path"] == "/trainstack/dev/", name
        assert inputs["permissionsBoundary"] == BOUNDARY_DEV, name
    assert dev.outputs["ciDeployRoleArn"] == DEV_DEPLOY
    (bounded,) = [s for s in boundary(dev)["Statement"] if s["Sid"] == "RolesCarryTheBoundary"]
    assert bounded["Condition"] == {"StringNotEquals": {"iam:PermissionsBoundary": BOUNDARY_DEV}}
    # A managed policy holds at most 6,144 characters, whitespace aside (IAM quotas).
    assert len("".join(json.dumps(boundary(dev)).split())) <= 6144
    assert len("".join(json.dumps(policies(dev)["deploy"]).split())) <= 10240  # a role's inline policies
    assert not [
        a for a in dev.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment") if "github" in a.name
    ]


def test_without_ci_roles_still_live_in_the_path_but_carry_no_boundary():
    run = plan("dev", jobs=[{"name": "train", "kind": "PyTorchJob", "nodeGroup": "gpu"}])
    roles = run.by_type("aws:iam/role:Role")
    assert {r.name for r in roles} >= {"eks-node", "image-codebuild", "training-pods-train-role"}
    assert {r.inputs["path"] for r in roles} == {"/trainstack/dev/"}
    assert [r.name for r in roles if "permissionsBoundary" in r.inputs] == []
    # The provider's ARN carries the path: the Pod Identity association passes it.
    association = run.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", "training-pods-train-association"
    )
    assert (
        association.inputs["roleArn"]
        == f"arn:aws:iam::{ACCOUNT}:role/trainstack/dev/trainstack-dev-job-train"
    )


def test_the_preview_role_reads_its_stack_and_no_user_data_or_build_environment(dev):
    state = f"arn:aws:s3:::{STATE}/.pulumi/stacks/trainstack/dev.json"
    assert as_role(dev, "preview", Request("kms:Decrypt", SECRETS_KEY)) == "allow"
    assert as_role(dev, "preview", Request("s3:GetObject", state)) == "allow"
    assert as_role(dev, "preview", Request("s3:PutObject", state)) == "implicit"
    assert as_role(dev, "preview", Request("ec2:DescribeInstances", "*")) == "allow"
    for request in [
        Request("ec2:DescribeInstanceAttribute", "*"),  # userData
        Request("ec2:DescribeLaunchTemplateVersions", "*"),  # user data
        Request("ec2:GetLaunchTemplateData", "*"),
        Request("codebuild:BatchGetProjects", "*"),  # environment variables
        Request("secretsmanager:GetSecretValue", f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:x"),
    ]:
        assert as_role(dev, "preview", request) != "allow", request


def test_a_tag_key_in_another_case_is_the_stack_tag(dev):
    """`aws:TagKeys` carries `TrainStack:Stack` as sent, and `aws:RequestTag/trainstack:stack` finds it
    whatever its case: dev's deploy role cannot create a role, or tag anything, as prod's that way.
    Before: `ForAnyValue:StringEquals` missed the key and the role was created."""
    for key in ("TrainStack:Stack", "TRAINSTACK:STACK"):
        prod = {f"aws:RequestTag/{key}": "prod", "aws:TagKeys": [key]}
        create = Request(
            "iam:CreateRole",
            f"arn:aws:iam::{ACCOUNT}:role/trainstack/dev/looks-like-prod",
            {**prod, "iam:PermissionsBoundary": BOUNDARY_DEV},
        )
        assert as_role(dev, "deploy", create) == "deny", key
        tag = Request("iam:TagRole", OURS, {**prod, "aws:ResourceTag/trainstack:stack": "dev"})
        assert as_role(dev, "deploy", tag) == "deny", key


def test_roles_under_the_boundary_never_reach_the_shared_state_bucket(dev):
    """A role dev's deploy role creates carries dev's boundary; whatever its own policy allows, the
    boundary keeps it out of the state bucket, prod's files and dev's alike. Before: the fence was in
    the deploy role's own policy only, and such a role rewrote prod's state."""
    created = f"arn:aws:iam::{ACCOUNT}:role/trainstack/dev/anything"
    anything = [{"Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}]
    for action, key in [
        ("s3:GetObject", ".pulumi/stacks/trainstack/prod.json"),
        ("s3:PutObject", ".pulumi/stacks/trainstack/prod.json"),
        ("s3:DeleteObject", ".pulumi/locks/trainstack/prod/lock.json"),
        ("s3:PutObject", ".pulumi/stacks/trainstack/dev.json"),
    ]:
        request = Request(action, f"arn:aws:s3:::{STATE}/{key}", {"aws:PrincipalArn": created})
        assert decide(anything, request, boundary(dev)) == "deny", (action, key)
    # The deploy role still writes its own stack's state, and only that.
    own = Request("s3:PutObject", f"arn:aws:s3:::{STATE}/.pulumi/stacks/trainstack/dev.json")
    assert as_role(dev, "deploy", own) == "allow"
