"""IAM for training pods: each job runs as its own service account, with an EKS Pod Identity
association for it.

A job's pods get its own checkpoints/<job>/ (read and write) and datasets/ (read), nothing else.
Images are pulled by the kubelet with the node role, so pods need no ECR access. The node role stays minimal; pods never
reach it (IMDS hop limit 1). On an EKS cluster the stack did not create, the association may name a
role the user brings; on a cluster outside AWS there is no association at all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.bucket import CHECKPOINT_PREFIX, DATASET_PREFIX
from components.cluster import Cluster
from components.iam import pod_identity_trust
from conventions import JOB_LABEL, PART_OF, TRAINING_NAMESPACE, job_service_account


def pod_identity(
    name: str,
    description: str,
    policy: pulumi.Input[str] | None,
    cluster: EksAccess,
    namespace: pulumi.Input[str],
    service_account: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    managed_policy_arn: str | None = None,
    role_name: str | None = None,
) -> tuple[aws.iam.Role, pulumi.Resource, aws.eks.PodIdentityAssociation]:
    """A role that EKS Pod Identity gives one service account, with its inline policy (or, for a
    driver whose permissions AWS maintains, that managed policy)."""
    role = aws.iam.Role(
        f"{name}-role",
        name=role_name,
        description=description,
        assume_role_policy=pulumi.Output.all(cluster.cluster_name, namespace, service_account).apply(
            lambda a: json.dumps(pod_identity_trust(*a))
        ),
        opts=opts,
    )
    role_policy = (
        aws.iam.RolePolicy(f"{name}-policy", role=role.id, policy=policy, opts=opts)
        if policy is not None
        else aws.iam.RolePolicyAttachment(
            f"{name}-policy", role=role.name, policy_arn=managed_policy_arn, opts=opts
        )
    )
    association = aws.eks.PodIdentityAssociation(
        f"{name}-association",
        cluster_name=cluster.cluster_name,
        namespace=namespace,
        service_account=service_account,
        role_arn=role.arn,
        # The agent add-on must run before pods can use the association.
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(depends_on=[*cluster.agent, role_policy])
        ),
    )
    return role, role_policy, association


@dataclass(frozen=True)
class EksAccess:
    """What a Pod Identity association needs of its EKS cluster."""

    cluster_name: pulumi.Input[str]
    agent: list[pulumi.Resource]  # the pod identity agent add-on, when the stack installs it

    @staticmethod
    def of(cluster: Cluster) -> EksAccess:
        return EksAccess(cluster.cluster_name, [cluster.pod_identity_agent])


@dataclass(frozen=True)
class TrainingPodIdentityArgs:
    provider: k8s.Provider
    eks: EksAccess | None  # None: a cluster outside EKS, no AWS identity for the pods
    bucket_arn: pulumi.Input[str] | None = None
    kms_key_arn: pulumi.Input[str] | None = None
    role_arn: str | None = None  # a role the user brings, instead of one per job for the stack's bucket
    namespace: str = TRAINING_NAMESPACE  # existingCluster.namespace on a cluster the stack did not create
    # A cluster the stack did not create: its namespace may be the owner's, holding their claims.
    existing_cluster: bool = False


class TrainingPodIdentity(pulumi.ComponentResource):
    """The training namespace, its Secrets, and one identity per job (`job_identity`).

    On a cluster the stack did not create, the namespace is a NamespacePatch that sets no field: a
    server-side apply, which uses the namespace where it exists and creates it where it does not,
    and whose delete only gives up the fields it set (pulumi-kubernetes await.go Creation and
    Deletion, for Patch resources): no AlreadyExists on the owner's namespace, and neither
    `pulumi destroy` nor a changed `existingCluster.namespace` deletes one (with the claims in it).
    A plain Namespace is created with a POST (AlreadyExists where it exists) and deleted with the
    stack."""

    def __init__(self, name: str, args: TrainingPodIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:compute:TrainingPodIdentity", name, None, opts)
        self._name, self._args = name, args
        self.namespace: k8s.core.v1.Namespace | k8s.core.v1.NamespacePatch
        if args.existing_cluster:
            self.namespace = k8s.core.v1.NamespacePatch(
                f"{name}-namespace",
                metadata={"name": args.namespace},
                opts=pulumi.ResourceOptions(
                    parent=self,
                    provider=args.provider,
                    # A stack from before held it as a Namespace: taken over, not deleted.
                    aliases=[pulumi.Alias(type_="kubernetes:core/v1:Namespace")],
                ),
            )
        else:
            self.namespace = k8s.core.v1.Namespace(
                f"{name}-namespace",
                metadata={"name": args.namespace, "labels": PART_OF},
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
            )
        self.role_arn: pulumi.Input[str] | None = args.role_arn
        self.namespace_name = args.namespace
        self.register_outputs({"roleArn": self.role_arn})

    def job_identity(
        self, job: str, role_name: str, reads: tuple[str, ...] = (), tracking_arn: str | None = None
    ) -> JobIdentity:
        """The service account `job`'s pods run as, with (on EKS) its own role: a role the user
        brought, or one that reaches the job's own checkpoints, the datasets, its `reads` and the
        SageMaker MLflow resource it logs to only."""
        return JobIdentity(
            f"{self._name}-{job}",
            JobIdentityArgs(self._args, self.namespace, job, role_name, reads, tracking_arn),
            pulumi.ResourceOptions(parent=self),
        )

    def secret(self, name: str, data: dict[str, pulumi.Input[str]]) -> k8s.core.v1.Secret:
        """A Secret in the training namespace that jobs read (its resource named as the object). The
        alias keeps the Secrets of stacks from before it was the namespace's child: renamed, not
        replaced (a replaced Secret relaunches every job that reads it)."""
        return k8s.core.v1.Secret(
            name,
            metadata={"name": name, "namespace": self.namespace_name, "labels": dict(PART_OF)},
            string_data={k: pulumi.Output.secret(v) for k, v in data.items()},
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=self._args.provider,
                depends_on=[self.namespace],
                aliases=[pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)],
            ),
        )


@dataclass(frozen=True)
class JobIdentityArgs:
    pods: TrainingPodIdentityArgs
    namespace: k8s.core.v1.Namespace | k8s.core.v1.NamespacePatch
    job: str
    role_name: str  # the stack's role for this job, fixed (IAM names are unique in the account)
    reads: tuple[str, ...] = ()  # other S3 locations it may read (jobs[].s3Read)
    tracking_arn: str | None = None  # a SageMaker managed MLflow resource it logs to (tracking.uri)


class JobIdentity(pulumi.ComponentResource):
    """One job's service account and, on EKS, its Pod Identity: pods of other jobs run as other
    accounts, so they never get this job's role."""

    def __init__(self, name: str, args: JobIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:compute:JobIdentity", name, None, opts)
        pods = args.pods
        self.service_account_name = job_service_account(args.job)
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-service-account",
            metadata={
                "name": self.service_account_name,
                "namespace": args.namespace.metadata["name"],
                "labels": {**PART_OF, JOB_LABEL: args.job},
            },
            opts=pulumi.ResourceOptions(parent=self, provider=pods.provider),
        )
        self.role = self.policy = self.association = None
        self.role_arn: pulumi.Input[str] | None = pods.role_arn
        if pods.eks is not None and pods.role_arn is not None:
            self.association = aws.eks.PodIdentityAssociation(
                f"{name}-association",
                cluster_name=pods.eks.cluster_name,
                namespace=args.namespace.metadata["name"],
                service_account=self.service_account.metadata["name"],
                role_arn=pods.role_arn,
                opts=pulumi.ResourceOptions(parent=self, depends_on=pods.eks.agent),
            )
        elif pods.eks is not None:
            self.role, self.policy, self.association = pod_identity(
                name,
                f"Pods of the trainstack job {args.job} (EKS Pod Identity)",
                pulumi.Output.all(pods.bucket_arn, pods.kms_key_arn).apply(
                    lambda a: json.dumps(job_policy(a[0], a[1], args.job, args.reads, args.tracking_arn))
                ),
                pods.eks,
                args.namespace.metadata["name"],
                self.service_account.metadata["name"],
                pulumi.ResourceOptions(parent=self),
                role_name=args.role_name,
            )
            self.role_arn = self.role.arn
        # What the job's pods wait for: their account, and its credentials where there are any.
        self.ready: pulumi.Resource = self.association or self.service_account
        self.register_outputs({"serviceAccount": self.service_account_name, "roleArn": self.role_arn})


def bucket_key_statements(kms_key_arn: str | None) -> list[dict]:
    """Reading and writing a KMS-encrypted bucket's objects needs its key (none for SSE-S3)."""
    if not kms_key_arn:
        return []
    return [
        {
            "Sid": "UseBucketKey",
            "Effect": "Allow",
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Resource": kms_key_arn,
        }
    ]


def read_statements(reads: tuple[str, ...]) -> list[dict]:
    """Read-only access to other S3 locations (s3://bucket or s3://bucket/prefix): list within the
    prefix, get its objects."""
    statements = []
    for i, location in enumerate(reads):
        bucket, _, prefix = location.removeprefix("s3://").partition("/")
        listing = {
            "Sid": f"ListRead{i}",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": f"arn:aws:s3:::{bucket}",
        }
        if prefix:
            listing["Condition"] = {"StringLike": {"s3:prefix": [f"{prefix}*"]}}
        statements += [
            listing,
            {
                "Sid": f"GetRead{i}",
                "Effect": "Allow",
                "Action": ["s3:GetObject"],
                "Resource": f"arn:aws:s3:::{bucket}/{prefix}*",
            },
        ]
    return statements


def job_policy(
    bucket_arn: str,
    kms_key_arn: str | None,
    job: str,
    reads: tuple[str, ...] = (),
    tracking_arn: str | None = None,
) -> dict:
    """What one job's pods do in the bucket: read and write its own checkpoints/<job>/, read
    datasets/, nothing else; and read the other locations of its `reads`. Another job's checkpoints
    are out of reach (a job could otherwise delete them, or plant a `.metadata` that torch unpickles
    on that job's resume), and so are build contexts, which the nightly image build reads. With a
    SageMaker managed MLflow resource as the tracking URI, its MLflow API on that resource alone
    (the sagemaker-mlflow plugin signs for the service `sagemaker-mlflow`)."""
    own = f"{CHECKPOINT_PREFIX}{job}/"
    statements = [
        {
            "Sid": "ListOwnCheckpointsAndDatasets",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": bucket_arn,
            # Not IfExists: a listing without a prefix would enumerate the whole bucket.
            "Condition": {"StringLike": {"s3:prefix": [f"{own}*", f"{DATASET_PREFIX}*"]}},
        },
        {
            "Sid": "ReadWriteOwnCheckpoints",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            "Resource": f"{bucket_arn}/{own}*",
        },
        {
            "Sid": "ReadDatasets",
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": f"{bucket_arn}/{DATASET_PREFIX}*",
        },
    ]
    if tracking_arn:
        statements.append(
            {
                "Sid": "TrackInSageMakerMlflow",
                "Effect": "Allow",
                "Action": ["sagemaker-mlflow:*"],
                "Resource": tracking_arn,
            }
        )
    return {
        "Version": "2012-10-17",
        "Statement": [*statements, *bucket_key_statements(kms_key_arn), *read_statements(reads)],
    }


# What the autoscaler reads to discover groups and build node templates (any resource: describe
# calls take no resource), and what it may change: only the stack's own autoscaled groups.
AUTOSCALER_READ_ACTIONS = (
    "autoscaling:DescribeAutoScalingGroups",
    "autoscaling:DescribeAutoScalingInstances",
    "autoscaling:DescribeLaunchConfigurations",
    "autoscaling:DescribeScalingActivities",
    "autoscaling:DescribeTags",
    "ec2:DescribeImages",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplateVersions",
    "ec2:GetInstanceTypesFromInstanceRequirements",
    "eks:DescribeNodegroup",
)
AUTOSCALER_WRITE_ACTIONS = (
    "autoscaling:SetDesiredCapacity",
    "autoscaling:TerminateInstanceInAutoScalingGroup",
)


def autoscaler_policy(region: str, account_id: str, group_names: list[str]) -> dict:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "Discover", "Effect": "Allow", "Action": list(AUTOSCALER_READ_ACTIONS), "Resource": "*"},
            {
                "Sid": "ScaleTheStacksGroups",
                "Effect": "Allow",
                "Action": list(AUTOSCALER_WRITE_ACTIONS),
                "Resource": autoscaling_group_arns(region, account_id, group_names),
            },
        ],
    }


def autoscaling_group_arns(region: str, account_id: str, group_names: list[str]) -> list[str]:
    """The groups by name, whatever their id (IAM's ARN form for an Auto Scaling group)."""
    return [
        f"arn:aws:autoscaling:{region}:{account_id}:autoScalingGroup:*:autoScalingGroupName/{g}"
        for g in group_names
    ]


@dataclass(frozen=True)
class ClusterAutoscalerIdentityArgs:
    cluster: Cluster
    region: str
    account_id: str
    autoscaling_group_names: list[pulumi.Input[str]]  # the stack's autoscaled GPU groups'
    namespace: str
    service_account: str


class ClusterAutoscalerIdentity(pulumi.ComponentResource):
    """Pod Identity for the cluster autoscaler: scale the stack's own GPU groups, nothing else."""

    def __init__(
        self, name: str, args: ClusterAutoscalerIdentityArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("trainstack:compute:ClusterAutoscalerIdentity", name, None, opts)
        self.role, self.policy, self.association = pod_identity(
            name,
            "Cluster autoscaler of trainstack (EKS Pod Identity)",
            pulumi.Output.all(*args.autoscaling_group_names).apply(
                lambda names: json.dumps(autoscaler_policy(args.region, args.account_id, list(names)))
            ),
            EksAccess.of(args.cluster),
            args.namespace,
            args.service_account,
            pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"roleArn": self.role.arn})
