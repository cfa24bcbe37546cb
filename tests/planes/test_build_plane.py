"""Build plane under the mock engine: bucket, registry, CodeBuild project, IAM, deterministic zip."""

from __future__ import annotations

import json
import os
import zipfile
from io import BytesIO

import pytest
from support.paths import ROOT
from support.plans import plan, policy_of, stack_values

from components.image import context_archive, image_tag, sha256
from offline.engine import run_program

BUCKET = "aws:s3/bucket:Bucket"
REPO = "aws:ecr/repository:Repository"
BASE_IMAGE = (  # image.baseImage's default
    "nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1"
)


def test_bucket_dev(dev_plan):
    bucket = dev_plan.one(BUCKET)
    assert bucket.inputs["forceDestroy"] is True
    sse = dev_plan.one(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    )
    assert sse.inputs["rules"][0]["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "AES256"}
    assert dev_plan.by_type("aws:kms/key:Key") == [dev_plan.one("aws:kms/key:Key", "eks-secrets")]


def test_bucket_prod_is_protected_and_kms_encrypted(prod_plan):
    bucket = prod_plan.one(BUCKET)
    assert bucket.inputs["forceDestroy"] is False
    sse = prod_plan.one(
        "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
    )
    rule = sse.inputs["rules"][0]
    assert rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "aws:kms"
    assert rule["applyServerSideEncryptionByDefault"]["kmsMasterKeyId"].startswith("arn:aws:kms:")
    assert rule["bucketKeyEnabled"] is True
    key = prod_plan.one("aws:kms/key:Key", "artifacts-key")
    assert key.inputs["enableKeyRotation"] is True


def test_protection_is_a_resource_option():
    # `protect` is an option, not an input: check it on the objects the program built.
    import pulumi

    from components.bucket import ArtifactBucket, ArtifactBucketArgs
    from components.registry import ImageRegistry, ImageRegistryArgs

    seen = {}

    @pulumi.runtime.test
    def build():
        for protect in (True, False):
            bucket = ArtifactBucket(f"b{protect}", ArtifactBucketArgs("KMS", 30, 14, protect))
            registry = ImageRegistry(f"r{protect}", ImageRegistryArgs(7, 30, not protect, protect))
            seen[protect] = (bucket.bucket._protect, bucket.kms_key._protect, registry.repository._protect)
        return pulumi.Output.from_input(1)

    from offline.engine import OfflineMocks

    pulumi.runtime.set_mocks(OfflineMocks("us-east-1"), project="trainstack", stack="t", preview=False)
    build()
    assert seen == {True: (True, True, True), False: (False, False, False)}


def test_bucket_blocks_public_access_and_versions(dev_plan):
    pab = dev_plan.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock")
    assert all(
        pab.inputs[k] is True
        for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    )
    versioning = dev_plan.one("aws:s3/bucketVersioning:BucketVersioning")
    assert versioning.inputs["versioningConfiguration"] == {"status": "Enabled"}


def test_bucket_policy_denies_plain_http(dev_plan):
    policy = json.loads(dev_plan.one("aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
    (stmt,) = policy["Statement"]
    assert stmt["Effect"] == "Deny"
    assert stmt["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    bucket_arn = f"arn:aws:s3:::{dev_plan.outputs['bucketName']}"
    assert stmt["Resource"] == [bucket_arn, f"{bucket_arn}/*"]


def test_lifecycle_rules_follow_config(dev_plan, prod_plan):
    def rules(run):
        lc = run.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
        return {r["id"]: r for r in lc.inputs["rules"]}

    dev, prod = rules(dev_plan), rules(prod_plan)
    assert dev["checkpoint-retention"]["expiration"] == {"days": 14}
    assert prod["checkpoint-retention"]["expiration"] == {"days": 90}
    assert dev["checkpoint-retention"]["filter"] == {"prefix": "checkpoints/"}
    # The current build context is what CodeBuild and the nightly schedule point at: it never
    # expires. Superseded ones (deleted by Pulumi, so noncurrent) go after the retention days.
    contexts = dev["expire-superseded-build-contexts"]
    assert contexts["filter"] == {"prefix": "build-contexts/"}
    assert contexts["expiration"] == {"expiredObjectDeleteMarker": True}
    assert "days" not in contexts["expiration"]
    assert contexts["noncurrentVersionExpiration"] == {"noncurrentDays": 14}
    assert dev["abort-incomplete-multipart-uploads"]["abortIncompleteMultipartUpload"] == {
        "daysAfterInitiation": 7
    }


def test_checkpoint_retention_zero_keeps_checkpoints(dev_plan):
    run = plan("dev", storage={"checkpointRetentionDays": 0})
    lc = run.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    (rule,) = [r for r in lc.inputs["rules"] if r["id"] == "checkpoint-retention"]
    assert "expiration" not in rule
    # Still an enabled rule on checkpoints/: overwritten and pruned versions go a day later, current
    # checkpoints stay.
    assert rule == {
        "id": "checkpoint-retention",
        "status": "Enabled",
        "filter": {"prefix": "checkpoints/"},
        "noncurrentVersionExpiration": {"noncurrentDays": 1},
    }
    # The setting touches that rule only.
    default = dev_plan.one("aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration")
    others = [r for r in default.inputs["rules"] if r["id"] != "checkpoint-retention"]
    assert [r for r in lc.inputs["rules"] if r["id"] != "checkpoint-retention"] == others


def test_registry_dev_and_prod(dev_plan, prod_plan):
    for run, force in ((dev_plan, True), (prod_plan, False)):
        repo = run.one(REPO)
        assert repo.inputs["imageTagMutability"] == "IMMUTABLE"
        assert repo.inputs["imageScanningConfiguration"] == {"scanOnPush": True}
        assert repo.inputs["encryptionConfigurations"] == [{"encryptionType": "AES256"}]
        assert repo.inputs["forceDelete"] is force


def test_registry_lifecycle_policy(prod_plan):
    policy = json.loads(prod_plan.one("aws:ecr/lifecyclePolicy:LifecyclePolicy").inputs["policy"])
    untagged, scheduled, stack_builds = policy["rules"]
    assert untagged["selection"] == {
        "tagStatus": "untagged",
        "countType": "sinceImagePushed",
        "countUnit": "days",
        "countNumber": 14,
    }
    # Nightly builds are counted apart: however many run, they never push the image the stack
    # runs (tagged build-...) out of the newest N.
    assert scheduled["selection"] == {
        "tagStatus": "tagged",
        "tagPrefixList": ["scheduled-"],
        "countType": "imageCountMoreThan",
        "countNumber": 100,
    }
    assert stack_builds["selection"]["tagPrefixList"] == ["build-"]
    assert all(r["selection"]["tagStatus"] != "any" for r in policy["rules"])
    assert len({r["rulePriority"] for r in policy["rules"]}) == 3
    buildspec = (ROOT / "components" / "buildspec.yml").read_text()
    assert 'IMAGE_TAG="${IMAGE_TAG:-scheduled-${CONTEXT_HASH}-' in buildspec
    tag = prod_plan.one("pulumi-python:dynamic:Resource").inputs["image_tag"]
    assert tag.startswith("build-")


def test_codebuild_project(dev_plan):
    project = dev_plan.one("aws:codebuild/project:Project")
    env = project.inputs["environment"]
    assert env["privilegedMode"] is True
    assert env["computeType"] == "BUILD_GENERAL1_LARGE"
    variables = {v["name"]: v["value"] for v in env["environmentVariables"]}
    assert variables["BASE_IMAGE"] == BASE_IMAGE
    assert variables["REPOSITORY_URI"].endswith(".amazonaws.com/trainstack/dev/training")
    assert project.inputs["source"]["type"] == "S3"
    assert project.inputs["source"]["buildspec"] == (ROOT / "components" / "buildspec.yml").read_text()
    assert (
        project.inputs["logsConfig"]["cloudwatchLogs"]["groupName"] == "/aws/codebuild/trainstack-dev-image"
    )
    logs = dev_plan.one("aws:cloudwatch/logGroup:LogGroup", "image-logs")
    assert logs.inputs["retentionInDays"] == 30


def test_context_upload_and_trigger_agree(dev_plan):
    obj = dev_plan.one("aws:s3/bucketObjectv2:BucketObjectv2")
    trigger = dev_plan.one("pulumi-python:dynamic:Resource")
    archive = context_archive(ROOT / "workload")
    context_hash = sha256(archive)
    assert obj.inputs["key"] == f"build-contexts/{context_hash}.zip"
    assert trigger.inputs["image_tag"] == image_tag(archive, BASE_IMAGE)
    assert trigger.inputs["source_location"].endswith(f"/build-contexts/{context_hash}.zip")
    # The boto3 side checks it builds in the stack's account, with the stack's profile.
    assert trigger.inputs["account_id"] == "123456789012"
    assert trigger.inputs["region"] == "us-east-1"
    assert dev_plan.outputs["imageUri"].startswith(dev_plan.outputs["repositoryUrl"] + "@sha256:")


def _statements(policy: dict) -> list[dict]:
    return policy["Statement"]


def test_codebuild_role_is_least_privilege(prod_plan):
    policy = policy_of(prod_plan, "image-codebuild")
    for stmt in _statements(policy):
        actions = stmt["Action"] if isinstance(stmt["Action"], list) else [stmt["Action"]]
        resources = stmt["Resource"] if isinstance(stmt["Resource"], list) else [stmt["Resource"]]
        if actions == ["ecr:GetAuthorizationToken"]:
            continue  # AWS defines no resource for it
        assert "*" not in resources, stmt
        for r in resources:
            assert r.startswith("arn:aws:"), r
    by_sid = {s["Sid"]: s for s in _statements(policy)}
    assert by_sid["PushImage"]["Resource"].endswith(":repository/trainstack/prod/training")
    assert by_sid["ReadBuildContexts"]["Resource"].endswith("/build-contexts/*")
    assert by_sid["OwnLogs"]["Resource"][0].endswith("log-group:/aws/codebuild/trainstack-prod-image")
    assert by_sid["DecryptContexts"]["Resource"].startswith("arn:aws:kms:")
    assert by_sid["RegistryLogin"]["Action"] == "ecr:GetAuthorizationToken"
    trust = json.loads(prod_plan.one("aws:iam/role:Role", "image-codebuild").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "codebuild.amazonaws.com"}


def test_nightly_rebuild_only_when_configured(dev_plan, prod_plan):
    assert dev_plan.by_type("aws:scheduler/schedule:Schedule") == []
    schedule = prod_plan.one("aws:scheduler/schedule:Schedule")
    assert schedule.inputs["scheduleExpression"] == "cron(0 3 * * ? *)"
    target = schedule.inputs["target"]
    assert target["arn"] == "arn:aws:scheduler:::aws-sdk:codebuild:startBuild"
    assert json.loads(target["input"])["ProjectName"] == "trainstack-prod-image"
    sched_policy = policy_of(prod_plan, "image-scheduler")
    (stmt,) = sched_policy["Statement"]
    assert stmt["Action"] == "codebuild:StartBuild" and stmt["Resource"].endswith(
        ":project/trainstack-prod-image"
    )


def test_source_repository_webhook():
    run = plan("dev", image={"sourceRepository": "https://github.com/acme/trainstack"})
    project = run.one("aws:codebuild/project:Project")
    assert project.inputs["source"]["type"] == "GITHUB"
    variables = {v["name"]: v["value"] for v in project.inputs["environment"]["environmentVariables"]}
    assert variables["CONTEXT_DIR"] == "workload"
    hook = run.one("aws:codebuild/webhook:Webhook")
    filters = hook.inputs["filterGroups"][0]["filters"]
    assert {"type": "HEAD_REF", "pattern": "^refs/heads/main$"} in filters
    assert {"type": "FILE_PATH", "pattern": "^workload/"} in filters


def test_docker_builder_gives_the_same_outputs():
    run = plan("dev", image={"builder": "docker"})
    assert run.by_type("aws:codebuild/project:Project") == []
    image = run.one("docker:index/image:Image")
    tag = image_tag(context_archive(ROOT / "workload"), BASE_IMAGE)
    assert image.inputs["imageName"].endswith(f"/trainstack/dev/training:{tag}")
    assert image.inputs["build"]["args"] == {"BASE_IMAGE": BASE_IMAGE}
    assert image.inputs["registry"]["password"] == "[secret]"
    assert run.outputs["imageUri"].startswith(run.outputs["repositoryUrl"] + "@sha256:")


def test_context_archive_is_deterministic(tmp_path):
    def make(root, order, mtime):
        for name in order:
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"content of {name}\n")
            os.utime(path, (mtime, mtime))

    a, b = tmp_path / "a", tmp_path / "b"
    make(a, ["Dockerfile", "trainer/train.py", "trainer/model.py"], 1_000_000_000)
    make(b, ["trainer/model.py", "Dockerfile", "trainer/train.py"], 1_700_000_000)
    (b / "trainer" / "__pycache__").mkdir()
    (b / "trainer" / "__pycache__" / "model.cpython-311.pyc").write_bytes(b"\0junk")
    assert context_archive(a) == context_archive(b)
    names = zipfile.ZipFile(BytesIO(context_archive(a))).namelist()
    assert names == ["Dockerfile", "trainer/model.py", "trainer/train.py"]
    (b / "trainer" / "train.py").write_text("changed\n")
    assert sha256(context_archive(a)) != sha256(context_archive(b))


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_stack_exports(stack, dev_plan, prod_plan):
    run = dev_plan if stack == "dev" else prod_plan
    assert run.outputs["clusterName"] == f"trainstack-{stack}"
    assert run.outputs["bucketName"]


def test_only_the_current_context_archive_is_kept():
    from planes.build import ARCHIVE_DIR

    # A stack of its own: other tests plan `dev` at the same time (pytest -n).
    stale = ARCHIVE_DIR / "archive-test" / ("0" * 64 + ".zip")
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"old context")
    run_program("archive-test", stack_values("dev"))
    context_hash = sha256(context_archive(ROOT / "workload"))
    assert sorted(p.name for p in stale.parent.iterdir()) == [f"{context_hash}.zip"]
    assert (stale.parent / f"{context_hash}.zip").read_bytes() == context_archive(ROOT / "workload")


def test_base_image_change_is_a_new_tag():
    archive = context_archive(ROOT / "workload")
    assert image_tag(archive, "pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime") != image_tag(
        archive, "pytorch/pytorch:2.9.0-cuda12.8-cudnn9-devel"
    )


def test_base_image_is_pulled_anonymously_without_docker_hub_credentials(dev_plan):
    assert dev_plan.by_type("aws:ecr/pullThroughCacheRule:PullThroughCacheRule") == []
    assert "PullBaseImageThroughCache" not in {
        s["Sid"] for s in _statements(policy_of(dev_plan, "image-codebuild"))
    }


def test_docker_hub_pull_through_cache():
    from support.plans import stack_values

    values = stack_values("dev", image={"dockerHubUsername": "trainstack-ci"})
    values["trainstack:dockerHubAccessToken"] = "dckr_pat_offline"
    run = run_program("dev", values, ["trainstack:dockerHubAccessToken"])
    rule = run.one("aws:ecr/pullThroughCacheRule:PullThroughCacheRule")
    secret = run.one("aws:secretsmanager/secret:Secret")
    assert rule.inputs["upstreamRegistryUrl"] == "registry-1.docker.io"
    assert rule.inputs["ecrRepositoryPrefix"] == "trainstack-dev-image-dockerhub"
    assert secret.inputs["namePrefix"].startswith("ecr-pullthroughcache/")  # ECR reads only these
    assert secret.urn in rule.dependencies
    version = run.one("aws:secretsmanager/secretVersion:SecretVersion")
    assert version.inputs["secretString"] == "[secret]"
    assert "dckr_pat_offline" not in json.dumps([r.as_json() for r in run.resources])
    env = {
        v["name"]: v["value"]
        for v in run.one("aws:codebuild/project:Project").inputs["environment"]["environmentVariables"]
    }
    assert env["BASE_IMAGE"] == (
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack-dev-image-dockerhub/" + BASE_IMAGE
    )
    cache = {s["Sid"]: s for s in _statements(policy_of(run, "image-codebuild"))}["PullBaseImageThroughCache"]
    assert (
        cache["Resource"] == "arn:aws:ecr:us-east-1:123456789012:repository/trainstack-dev-image-dockerhub/*"
    )
    assert "ecr:BatchImportUpstreamImage" in cache["Action"]


def test_docker_hub_official_images_live_under_library():
    from components.image import docker_hub_cache_path

    assert docker_hub_cache_path("ubuntu:24.04", "p") == "p/library/ubuntu:24.04"
    assert docker_hub_cache_path("pytorch/pytorch:2.9.1", "p") == "p/pytorch/pytorch:2.9.1"


def test_the_smoke_test_fails_an_image_without_the_efa_stack_or_a_compiler(tmp_path):
    """The runtime base has neither: the build's smoke test is what proves the EFA installer and
    gcc made it into the image, before anything is pushed."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("smoke_test", ROOT / "workload" / "smoke_test.py")
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    bare = smoke.image_problems(tmp_path, which=lambda _: None)
    assert [p.split(" missing")[0] for p in bare[:2]] == ["aws-ofi-nccl (NCCL's EFA plugin)", "libfabric"]
    assert bare[2].startswith("no C compiler on PATH")
    plugin = tmp_path / "opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so"
    fabric = tmp_path / "opt/amazon/efa/lib/libfabric.so.1"
    for f in (plugin, fabric):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.touch()
    assert smoke.image_problems(tmp_path, which=lambda name: f"/usr/bin/{name}") == []
    dockerfile = (ROOT / "workload" / "Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={BASE_IMAGE}" in dockerfile
    assert " gcc " in dockerfile


@pytest.mark.parametrize(
    ("base", "problem"),
    [
        ("nvidia/cuda:13.0.3-base-ubuntu24.04", "not pinned by digest: a tag can be pushed again"),
        ("nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c74", "not an image reference"),
    ],
)
def test_a_base_image_not_pinned_by_a_whole_digest_is_refused(base, problem):
    from config import parse_config
    from config.schema import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_config("dev", stack_values("dev", image={"baseImage": base}))
    assert f'trainstack:image.baseImage = "{base}": {problem}' in str(err.value)
    assert "allowed: [registry/]repository[:tag]@sha256:<64 hex>" in str(err.value)


def test_a_digest_with_or_without_a_tag_is_accepted():
    from config import parse_config

    digest = "@sha256:" + "0" * 64
    for base in ("ubuntu" + digest, "123456789012.dkr.ecr.us-east-1.amazonaws.com/cuda:13.0" + digest):
        assert parse_config("dev", stack_values("dev", image={"baseImage": base})).image.base_image == base
