"""`pulumi up` inside the stack's VPC: an AWS CodeBuild project the deploy job starts.

GitHub-hosted runners egress from ranges no one can list, so they cannot reach an API endpoint
limited to `publicAccessCidrs`, nor a private one. The deploy job (on a GitHub-hosted runner, in its
protected environment, on main's head: .github/workflows/deploy.yml) takes the deploy role through
OIDC and starts a build of this project at its commit (`codebuild:StartBuild`, sourceVersion), which
runs `pulumi up` in the VPC's private subnets as the deploy role, and waits for it
(.github/in_vpc_up.py).

No webhook: a project with one (a CodeBuild-hosted GitHub Actions runner) runs any queued workflow
job its filters match, and a webhook sees a job's workflow `name:` and branch, both of which a
branch's or a fork's workflow sets as it likes (`name: deploy`, a fork's own `main`), never the
workflow file and ref the deploy role's OIDC trust checks. Here the only way in is StartBuild, which
only the deploy role (an approved deploy job) and the account's administrators may call. The
build's commands are the stack's (the project's buildspec), the program the commit's, pinned by
hash (requirements.lock) and the Pulumi CLI by the release's checksums.

The project keeps the name of the runner it replaces (`trainstack-<stack>-github-runner`, output
`ciRunnerProject`), so a repository variable set for the runner still names it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import yaml

from domain.network import PrivateNetwork

DEPLOY_IMAGE = "aws/codebuild/amazonlinux-x86_64-standard:5.0"
DEPLOY_COMPUTE = "BUILD_GENERAL1_SMALL"
LOG_RETENTION_DAYS = 30
# A first `up` with an EKS cluster takes ~30 min; under the deploy job's 4-hour session, which the job
# polls the build with.
BUILD_TIMEOUT_MINUTES = 180
PULUMI_RELEASES = "https://github.com/pulumi/pulumi/releases/download"


def deploy_buildspec(stack: str) -> str:
    """What a build runs, from the commit's checkout: the program's requirements by hash, the Pulumi
    CLI of `.pulumi-version` checked against the release's checksums (pulumi's .goreleaser.yml names
    the archive `pulumi-v<version>-linux-x64.tar.gz` and the sums `pulumi-<version>-checksums.txt`),
    then `pulumi up` on the backend the build is started with (PULUMI_BACKEND_URL)."""
    version = "$(cat .pulumi-version)"
    fetch = (
        f'v={version} && curl -fsSLo "pulumi-v$v-linux-x64.tar.gz" "{PULUMI_RELEASES}/v$v/pulumi-v$v-linux-x64.tar.gz" '
        f'&& curl -fsSLo sums.txt "{PULUMI_RELEASES}/v$v/pulumi-$v-checksums.txt" '
        '&& grep " pulumi-v$v-linux-x64.tar.gz$" sums.txt | sha256sum -c - '
        '&& tar -xzf "pulumi-v$v-linux-x64.tar.gz" -C /opt'
    )
    spec = {
        "version": 0.2,
        "env": {"shell": "bash", "variables": {"PULUMI_SKIP_UPDATE_CHECK": "true"}},
        "phases": {
            "install": {
                "runtime-versions": {"python": "3.11"},
                "commands": [
                    "python3 -m venv .venv",
                    ".venv/bin/python -m pip install --require-hashes --only-binary :all: -r requirements.lock",
                    fetch,
                ],
            },
            "build": {
                "commands": [
                    'test -n "$PULUMI_BACKEND_URL"',
                    'export PATH="/opt/pulumi:$PWD/.venv/bin:$PATH"',
                    'pulumi login "$PULUMI_BACKEND_URL"',
                    f"pulumi up --yes --non-interactive --skip-preview --stack {stack}",
                ]
            },
        },
    }
    return yaml.safe_dump(spec, sort_keys=False)


@dataclass(frozen=True)
class CiRunnerArgs:
    project_name: str
    repository: str  # owner/repo
    stack: str
    deploy_role_arn: pulumi.Input[str]  # what the build runs as (its trust names this project)
    network: PrivateNetwork[pulumi.Input[str]]  # where its builds run


class CiRunner(pulumi.ComponentResource):
    def __init__(self, name: str, args: CiRunnerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:ci:CiRunner", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            description=f"pulumi up of {args.repository} inside the VPC: egress only",
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
            description="The in-VPC deploy reaches the cluster's API endpoint",
            opts=child,
        )
        self.logs = aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=f"/aws/codebuild/{args.project_name}",
            retention_in_days=LOG_RETENTION_DAYS,
            opts=child,
        )
        self.project = aws.codebuild.Project(
            f"{name}-project",
            name=args.project_name,
            description=f"pulumi up of {args.repository}'s stack {args.stack} inside its VPC (started by the deploy role)",
            service_role=args.deploy_role_arn,
            source={
                "type": "GITHUB",
                "location": f"https://github.com/{args.repository}.git",
                "buildspec": deploy_buildspec(args.stack),
            },
            artifacts={"type": "NO_ARTIFACTS"},
            environment={"type": "LINUX_CONTAINER", "compute_type": DEPLOY_COMPUTE, "image": DEPLOY_IMAGE},
            build_timeout=BUILD_TIMEOUT_MINUTES,
            concurrent_build_limit=1,  # one `up` at a time, as the workflow's concurrency group
            vpc_config={
                "vpc_id": args.network.vpc_id,
                "subnets": args.network.private_subnet_ids,
                "security_group_ids": [self.security_group.id],
            },
            logs_config={"cloudwatch_logs": {"group_name": self.logs.name}},
            opts=child,
        )
        self.project_name = self.project.name
        self.register_outputs({"projectName": self.project_name})
