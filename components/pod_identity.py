"""IAM for training pods: an EKS Pod Identity association for the training service account.

Pods get the stack's bucket (list it, read/write objects), nothing else. Images are pulled by the
kubelet with the node role, so pods need no ECR access. The node role stays minimal; pods never
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
from components.iam import service_trust
from conventions import PART_OF, TRAINING_NAMESPACE, TRAINING_SERVICE_ACCOUNT


def pod_identity(
    name: str,
    description: str,
    policy: pulumi.Input[str] | None,
    cluster: EksAccess,
    namespace: pulumi.Input[str],
    service_account: pulumi.Input[str],
    opts: pulumi.ResourceOptions,
    managed_policy_arn: str | None = None,
) -> tuple[aws.iam.Role, pulumi.Resource, aws.eks.PodIdentityAssociation]:
    """A role that EKS Pod Identity gives one service account, with its inline policy (or, for a
    driver whose permissions AWS maintains, that managed policy)."""
    role = aws.iam.Role(
        f"{name}-role",
        description=description,
        assume_role_policy=json.dumps(
            service_trust("pods.eks.amazonaws.com", ("sts:AssumeRole", "sts:TagSession"))
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
    role_arn: str | None = None  # a role the user brings, instead of one for the stack's bucket


class TrainingPodIdentity(pulumi.ComponentResource):
    def __init__(self, name: str, args: TrainingPodIdentityArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:compute:TrainingPodIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)

        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": TRAINING_NAMESPACE, "labels": PART_OF},
            opts=k8s_opts,
        )
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-service-account",
            metadata={
                "name": TRAINING_SERVICE_ACCOUNT,
                "namespace": self.namespace.metadata["name"],
                "labels": PART_OF,
            },
            opts=k8s_opts,
        )
        self.role = self.policy = self.association = None
        self.role_arn: pulumi.Input[str] | None = args.role_arn
        if args.eks is not None and args.role_arn is not None:
            self.association = aws.eks.PodIdentityAssociation(
                f"{name}-association",
                cluster_name=args.eks.cluster_name,
                namespace=self.namespace.metadata["name"],
                service_account=self.service_account.metadata["name"],
                role_arn=args.role_arn,
                opts=pulumi.ResourceOptions(parent=self, depends_on=args.eks.agent),
            )
        elif args.eks is not None:
            self.role, self.policy, self.association = pod_identity(
                name,
                "Training pods of trainstack (EKS Pod Identity)",
                pulumi.Output.all(args.bucket_arn, args.kms_key_arn).apply(
                    lambda a: json.dumps(training_policy(*a))
                ),
                args.eks,
                self.namespace.metadata["name"],
                self.service_account.metadata["name"],
                child,
            )
            self.role_arn = self.role.arn
        self.namespace_name = TRAINING_NAMESPACE
        self.service_account_name = TRAINING_SERVICE_ACCOUNT
        self._provider = args.provider
        self.register_outputs({"roleArn": self.role_arn})

    def secret(self, name: str, data: dict[str, pulumi.Input[str]]) -> k8s.core.v1.Secret:
        """A Secret in the training namespace that jobs read (its resource named as the object). The
        alias keeps the Secrets of stacks from before it was the namespace's child: renamed, not
        replaced (a replaced Secret relaunches every job that reads it)."""
        return k8s.core.v1.Secret(
            name,
            metadata={"name": name, "namespace": self.namespace_name},
            string_data={k: pulumi.Output.secret(v) for k, v in data.items()},
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=self._provider,
                depends_on=[self.namespace],
                aliases=[pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)],
            ),
        )


def training_policy(bucket_arn: str, kms_key_arn: str | None) -> dict:
    """What training pods do in the bucket: read and write checkpoints and datasets (data
    preparation runs as a job), nothing else. Build contexts stay out of reach: the nightly image
    build reads them, so a job that could write there could put code into the next image."""
    prefixes = (CHECKPOINT_PREFIX, DATASET_PREFIX)
    statements = [
        {
            "Sid": "ListJobPrefixes",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": bucket_arn,
            # IfExists: HeadBucket (pyarrow's S3 filesystem under Ray Train) carries no prefix.
            "Condition": {"StringLikeIfExists": {"s3:prefix": [f"{p}*" for p in prefixes]}},
        },
        {
            "Sid": "ReadWriteJobObjects",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
            "Resource": [f"{bucket_arn}/{p}*" for p in prefixes],
        },
    ]
    if kms_key_arn:
        statements.append(
            {
                "Sid": "UseBucketKey",
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": kms_key_arn,
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


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
                "Resource": [
                    f"arn:aws:autoscaling:{region}:{account_id}:autoScalingGroup:*:autoScalingGroupName/{g}"
                    for g in group_names
                ],
            },
        ],
    }


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
