"""The stack's fence: the denies of its permissions boundary (every role the stack creates carries
it, the CI roles included, and the deploy role's own policy repeats them) and of its bucket's policy.

An explicit deny wins over any allow (IAM's policy evaluation logic), so a role under this boundary
reaches no other stack's resources whatever its own policies say. Tags fence what carries them;
what tags cannot fence is fenced by name: IAM by the stack's path (`/trainstack/<stack>/`), the
scheduler by the stack's schedule group, the bucket by its policy (S3 evaluates no resource tags on
a general-purpose bucket unless ABAC is turned on for it, so the bucket names its principals).
"""

from __future__ import annotations

from dataclasses import dataclass

from domain.names import STACK_TAG

# What a key's data operations are: the fence keeps them to the stack's own keys.
KMS_DATA_ACTIONS = [
    "kms:CreateGrant",
    "kms:Decrypt",
    "kms:DisableKey",
    "kms:Encrypt",
    "kms:GenerateDataKey*",
    "kms:PutKeyPolicy",
    "kms:ReEncrypt*",
    "kms:ScheduleKeyDeletion",
]
# IAM actions that give a role permissions: allowed only on roles that carry the stack's boundary
# (each supports the iam:PermissionsBoundary condition key, per the IAM service authorization
# reference; AWS's "delegate permissions boundaries" example uses exactly this set).
BOUNDED_ROLE_ACTIONS = [
    "iam:AttachRolePolicy",
    "iam:CreateRole",
    "iam:DeleteRolePolicy",
    "iam:DetachRolePolicy",
    "iam:PutRolePermissionsBoundary",
    "iam:PutRolePolicy",
]
# Every IAM action that changes something (the service authorization reference's Write, Permissions
# management and Tagging actions, by verb), and PassRole: outside the stack's path none is allowed.
IAM_WRITE_ACTIONS = [
    "iam:Add*",
    "iam:Attach*",
    "iam:Change*",
    "iam:Create*",
    "iam:Deactivate*",
    "iam:Delete*",
    "iam:Detach*",
    "iam:Enable*",
    "iam:PassRole",
    "iam:Put*",
    "iam:Remove*",
    "iam:Reset*",
    "iam:Resync*",
    "iam:Set*",
    "iam:Tag*",
    "iam:Untag*",
    "iam:Update*",
    "iam:Upload*",
]
# The one IAM write outside the path: the service-linked roles EKS, its node groups, Auto Scaling and
# FSx need in a fresh account. Their permissions are AWS's, not the caller's.
SERVICE_LINKED_ROLES = [
    "autoscaling.amazonaws.com",
    "eks-nodegroup.amazonaws.com",
    "eks.amazonaws.com",
    "fsx.amazonaws.com",
    "s3.data-source.lustre.fsx.amazonaws.com",
]
SCHEDULE_ACTIONS = [
    "scheduler:CreateSchedule",
    "scheduler:DeleteSchedule",
    "scheduler:GetSchedule",
    "scheduler:UpdateSchedule",
]


@dataclass(frozen=True)
class Fence:
    """What the fence names: the stack, its cluster, its IAM path and the ARNs fixed in advance."""

    stack: str
    cluster_name: str  # EKS tags what it creates for a node group with `eks:cluster-name`
    iam_path: str  # /trainstack/<stack>/
    boundary_arn: str
    ci_arns: list[str]  # the CI roles and the OIDC provider: changed only with a person's credentials
    secrets_key_arn: str | None  # the secrets provider's key, made outside the stack
    schedule_group: str
    state_bucket: str | None = None  # a self-managed backend's bucket, shared by stacks
    state_roles: tuple[str, ...] = ()  # the only principals under the fence that reach it: the CI roles


def in_path(fence: Fence, kind: str) -> str:
    return f"arn:aws:iam::*:{kind}{fence.iam_path}*"


def stack_fence(fence: Fence) -> list[dict]:
    """AWS puts a resource's tags in `aws:ResourceTag/<key>` and a request's in `aws:RequestTag/<key>`
    and `aws:TagKeys`; negated operators (StringNotEquals) match when the key is absent, so
    "tagged, and not ours" is `Null: false` together with `StringNotEquals`."""
    tag = f"aws:ResourceTag/{STACK_TAG}"
    cluster_tag = "aws:ResourceTag/eks:cluster-name"
    kms: dict = {
        "Sid": "OnlyOurKeys",
        "Effect": "Deny",
        "Action": KMS_DATA_ACTIONS,
        # Direct calls only: a service using a key on the caller's behalf (EBS, S3) sets kms:ViaService.
        "Condition": {"StringNotEquals": {tag: fence.stack}, "Null": {"kms:ViaService": "true"}},
    }
    if fence.secrets_key_arn:
        kms["NotResource"] = [fence.secrets_key_arn]
    else:
        kms["Resource"] = "*"
    return [
        {
            "Sid": "NotOtherStacks",
            "Effect": "Deny",
            "Action": "*",
            "Resource": "*",
            "Condition": {"Null": {tag: "false"}, "StringNotEquals": {tag: fence.stack}},
        },
        {
            # Instances, ENIs and Auto Scaling groups EKS creates for another cluster's node groups.
            "Sid": "NotOtherClusters",
            "Effect": "Deny",
            "Action": "*",
            "Resource": "*",
            "Condition": {
                "Null": {cluster_tag: "false"},
                "StringNotEquals": {cluster_tag: fence.cluster_name},
            },
        },
        {
            # The stack tag is set to this stack or not at all: no claiming another stack's resource,
            # no creating one in another stack's name, no removing the tag. In any case: `aws:TagKeys`
            # carries keys as sent, while `aws:RequestTag/<key>` (and a role's `aws:PrincipalTag/`)
            # finds the key whatever its case, so `TrainStack:Stack = prod` is prod's tag too.
            "Sid": "StackTagIsOurs",
            "Effect": "Deny",
            "Action": "*",
            "Resource": "*",
            "Condition": {
                "ForAnyValue:StringEqualsIgnoreCase": {"aws:TagKeys": [STACK_TAG]},
                "StringNotEquals": {f"aws:RequestTag/{STACK_TAG}": fence.stack},
            },
        },
        kms,
        {
            # IAM carries no tag of an existing role or policy it did not create: the path fences
            # it. Every IAM write and PassRole outside it is refused; CreateServiceLinkedRole (the
            # only action with iam:AWSServiceName) is fenced below instead.
            "Sid": "IamOnlyInOurPath",
            "Effect": "Deny",
            "Action": IAM_WRITE_ACTIONS,
            "NotResource": [in_path(fence, kind) for kind in ("role", "policy", "instance-profile")],
            "Condition": {"Null": {"iam:AWSServiceName": "true"}},
        },
        {
            "Sid": "OnlyTheServiceLinkedRolesWeUse",
            "Effect": "Deny",
            "Action": "iam:CreateServiceLinkedRole",
            "Resource": "*",
            "Condition": {"StringNotEquals": {"iam:AWSServiceName": SERVICE_LINKED_ROLES}},
        },
        {
            "Sid": "AssumeOnlyOurRoles",
            "Effect": "Deny",
            "Action": ["sts:AssumeRole", "sts:TagSession", "sts:SetSourceIdentity"],
            "NotResource": in_path(fence, "role"),
        },
        {
            # A trust edit hands a role, ours too, to someone else: trust changes only with a
            # person's credentials. Identity providers, users and groups are outside every path
            # of ours (above). A new role's trust policy has no condition key, so CreateRole in our
            # path takes any: account_checks/account_mode.py finds such a role at the next run.
            "Sid": "NoTrustEdits",
            "Effect": "Deny",
            "Action": "iam:UpdateAssumeRolePolicy",
            "Resource": "*",
        },
        {
            "Sid": "RolesCarryTheBoundary",
            "Effect": "Deny",
            "Action": BOUNDED_ROLE_ACTIONS,
            "Resource": "*",
            "Condition": {"StringNotEquals": {"iam:PermissionsBoundary": fence.boundary_arn}},
        },
        {
            "Sid": "BoundaryStays",
            "Effect": "Deny",
            "Action": ["iam:DeleteRolePermissionsBoundary", "iam:DeleteUserPermissionsBoundary"],
            "Resource": "*",
        },
        {
            # CI access itself changes only with a person's credentials (see docs/ci.md).
            "Sid": "CiAccessStays",
            "Effect": "Deny",
            "Action": [a for a in IAM_WRITE_ACTIONS if a != "iam:PassRole"],
            "Resource": [fence.boundary_arn, *fence.ci_arns],
        },
        {
            "Sid": "OnlyOurSchedules",
            "Effect": "Deny",
            "Action": SCHEDULE_ACTIONS,
            "NotResource": f"arn:aws:scheduler:*:*:schedule/{fence.schedule_group}/*",
        },
        *state_fence(fence),
    ]


def state_fence(fence: Fence) -> list[dict]:
    """A shared state bucket holds every stack's state, and a rewritten state (an EKS endpoint of
    someone else's) hands the next `up`'s Kubernetes Secrets away. In the boundary, every role under
    it but the stack's own CI roles is kept out of the bucket whole (a deny that spared this stack's
    files could not name them apart from another's); the CI roles' own policies allow this stack's
    files only (components/ci_access.py state_objects)."""
    if not fence.state_bucket:
        return []
    bucket = f"arn:aws:s3:::{fence.state_bucket}"
    return [
        {
            "Sid": "StateOnlyByOurCiRoles",
            "Effect": "Deny",
            "Action": "s3:*",
            "Resource": [bucket, f"{bucket}/*"],
            "Condition": {"ArnNotEquals": {"aws:PrincipalArn": list(fence.state_roles)}},
        }
    ]


def boundary_policy(fence: Fence) -> dict:
    """The permissions boundary: everything but the fence. Effective permissions are the role's
    own policies intersected with this, less every deny."""
    allow = {"Sid": "WithinTheFence", "Effect": "Allow", "Action": "*", "Resource": "*"}
    return {"Version": "2012-10-17", "Statement": [allow, *stack_fence(fence)]}


# FSx for Lustre reads and writes a linked bucket as a service-linked role of the file system's own
# (`AWSServiceRoleForFSxS3Access_<file system id>`), which carries no tag of the stack.
FSX_LINKED_ROLE_PATH = "role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"


def fsx_linked_role(account_id: str, file_system_id: str) -> str:
    """The role one file system reads and writes its linked bucket as: named by its id, so a policy
    lets in the stack's own file system and no other in the account."""
    return f"arn:aws:iam::{account_id}:{FSX_LINKED_ROLE_PATH}AWSServiceRoleForFSxS3Access_{file_system_id}"


# What only the stack's deploy role may do to its bucket: lose data for good (versions, the bucket)
# or change what keeps it (policy, lifecycle, versioning, encryption, object lock).
BUCKET_GUARD_ACTIONS = [
    "s3:DeleteBucket",
    "s3:DeleteBucketPolicy",
    "s3:DeleteObjectVersion",
    "s3:PutBucketObjectLockConfiguration",
    "s3:PutBucketPolicy",
    "s3:PutBucketVersioning",
    "s3:PutEncryptionConfiguration",
    "s3:PutLifecycleConfiguration",
]


@dataclass(frozen=True)
class BucketFence:
    stack: str
    account_id: str
    iam_path: str  # /trainstack/<stack>/: every role the stack creates, and only those
    deploy_role_arn: str
    break_glass_role_arn: str  # a person's way in: the bootstrap `up` and repairs
    fsx_file_system_ids: tuple[str, ...] = ()  # the stack's FSx file systems linked to the bucket


def bucket_fence(fence: BucketFence, bucket_arn: str) -> list[dict]:
    """The bucket policy's denies. Principals are told apart by `aws:PrincipalArn` (a role session's
    is the role's ARN, path included): the stack's roles live under its IAM path, where no other
    stack's deploy role may create one (ci_fence IamOnlyInOurPath). Not by tags: a role's tags are
    set by whoever creates it, and a key in another case reads as the same tag."""
    resources = [bucket_arn, f"{bucket_arn}/*"]
    fsx = [fsx_linked_role(fence.account_id, i) for i in fence.fsx_file_system_ids]
    ours = f"arn:aws:iam::{fence.account_id}:role{fence.iam_path}*"
    return [
        {
            "Sid": "OnlyThisStacksPrincipals",
            "Effect": "Deny",
            "Principal": "*",
            "Action": "s3:*",
            "Resource": resources,
            "Condition": {"ArnNotLike": {"aws:PrincipalArn": [ours, fence.break_glass_role_arn, *fsx]}},
        },
        {
            "Sid": "OnlyTheDeployRoleLosesOrReconfigures",
            "Effect": "Deny",
            "Principal": "*",
            "Action": BUCKET_GUARD_ACTIONS,
            "Resource": resources,
            "Condition": {
                "ArnNotEquals": {"aws:PrincipalArn": [fence.deploy_role_arn, fence.break_glass_role_arn]}
            },
        },
    ]
