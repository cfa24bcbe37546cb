"""A GitHub Actions runner inside the stack's VPC: an AWS CodeBuild-hosted runner project.

GitHub-hosted runners egress from ranges no one can list, so they cannot reach an API endpoint
limited to `publicAccessCidrs`, nor a private one. CodeBuild starts a build in the VPC's private
subnets for each queued workflow job of the deploy workflow (a webhook on WORKFLOW_JOB_QUEUED) whose
`runs-on` is `codebuild-<project>-${{ github.run_id }}-${{ github.run_attempt }}`, and that build
runs the job. The job still assumes its role through OIDC: the project's own role only writes its
logs and attaches the build to the VPC, since any workflow job that lands on the runner holds it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from components.iam import service_trust
from domain.network import PrivateNetwork

RUNNER_IMAGE = "aws/codebuild/amazonlinux-x86_64-standard:5.0"
RUNNER_COMPUTE = "BUILD_GENERAL1_SMALL"
LOG_RETENTION_DAYS = 30
# What a CodeBuild build in a VPC does with the network (CodeBuild user guide, "Allow CodeBuild to
# access AWS services required to create a VPC network interface").
VPC_ACTIONS = [
    "ec2:CreateNetworkInterface",
    "ec2:DeleteNetworkInterface",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
]


@dataclass(frozen=True)
class CiRunnerArgs:
    project_name: str
    repository: str  # owner/repo
    workflow_name: str  # the deploy workflow's `name:`: only its jobs start a build
    network: PrivateNetwork[pulumi.Input[str]]  # where its builds run
    region: str
    account_id: str


def runner_policy(args: CiRunnerArgs, log_group_arn: str) -> dict:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "Logs",
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": f"{log_group_arn}:*",
            },
            {"Sid": "VpcNetworkInterfaces", "Effect": "Allow", "Action": VPC_ACTIONS, "Resource": "*"},
            {
                "Sid": "AttachToTheStacksSubnets",
                "Effect": "Allow",
                "Action": "ec2:CreateNetworkInterfacePermission",
                "Resource": f"arn:aws:ec2:{args.region}:{args.account_id}:network-interface/*",
                "Condition": {"StringEquals": {"ec2:AuthorizedService": "codebuild.amazonaws.com"}},
            },
        ],
    }


class CiRunner(pulumi.ComponentResource):
    def __init__(self, name: str, args: CiRunnerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:ci:CiRunner", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            description=f"GitHub Actions runner of {args.repository}: egress only",
            vpc_id=args.network.vpc_id,
            egress=[{"protocol": "-1", "from_port": 0, "to_port": 0, "cidr_blocks": ["0.0.0.0/0"]}],
            opts=child,
        )
        # The private API endpoint answers on 443 in the cluster's security group.
        self.api_access = aws.vpc.SecurityGroupIngressRule(
            f"{name}-api",
            security_group_id=args.network.cluster_security_group_id,
            referenced_security_group_id=self.security_group.id,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            description="The CI runner reaches the cluster's API endpoint",
            opts=child,
        )
        logs = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=f"/aws/codebuild/{args.project_name}",
            retention_in_days=LOG_RETENTION_DAYS,
            opts=child,
        )
        role = aws.iam.Role(
            f"{name}-role",
            description=f"CodeBuild-hosted GitHub Actions runner of {args.repository}",
            assume_role_policy=json.dumps(service_trust("codebuild.amazonaws.com")),
            opts=child,
        )
        policy = aws.iam.RolePolicy(
            f"{name}-policy",
            role=role.id,
            policy=logs.arn.apply(lambda arn: json.dumps(runner_policy(args, arn))),
            opts=child,
        )
        self.project = aws.codebuild.Project(
            f"{name}-project",
            name=args.project_name,
            description=f"GitHub Actions runner of {args.repository} inside the stack's VPC",
            service_role=role.arn,
            source={"type": "GITHUB", "location": f"https://github.com/{args.repository}.git"},
            artifacts={"type": "NO_ARTIFACTS"},
            environment={"type": "LINUX_CONTAINER", "compute_type": RUNNER_COMPUTE, "image": RUNNER_IMAGE},
            vpc_config={
                "vpc_id": args.network.vpc_id,
                "subnets": args.network.private_subnet_ids,
                "security_group_ids": [self.security_group.id],
            },
            logs_config={"cloudwatch_logs": {"group_name": logs.name}},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]),
        )
        self.webhook = aws.codebuild.Webhook(
            f"{name}-webhook",
            project_name=self.project.name,
            build_type="BUILD",
            filter_groups=[
                {
                    "filters": [
                        {"type": "EVENT", "pattern": "WORKFLOW_JOB_QUEUED"},
                        {"type": "WORKFLOW_NAME", "pattern": f"^{args.workflow_name}$"},
                    ]
                }
            ],
            opts=child,
        )
        self.project_name = self.project.name
        self.register_outputs({"projectName": self.project_name})
