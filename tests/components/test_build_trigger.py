"""The CodeBuild trigger against moto, with botocore's Stubber for faults moto cannot produce."""

from __future__ import annotations

import json
import time as wall_time
from typing import ClassVar

import boto3
import botocore.exceptions
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from components import build_trigger
from components.build_trigger import BuildFailed, BuildRunner, ImageBuildProvider

REGION = "us-east-1"
HASH = "a" * 64
TAG = f"build-{HASH}"
ACCOUNT = "123456789012"  # moto's account
REPO = "trainstack/dev/training"
PROJECT = "trainstack-dev-image"


@pytest.fixture(autouse=True)
def aws_env(monkeypatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(key, value)
    with mock_aws():
        yield


def inputs(**over) -> dict:
    return {
        "region": REGION,
        "project_name": PROJECT,
        "source_location": f"bucket/build-contexts/{HASH}.zip",
        "image_tag": TAG,
        "repository_url": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/{REPO}",
        "repository_name": REPO,
        "timeout_minutes": 60,
        "account_id": ACCOUNT,
        "aws_profile": None,
        **over,
    }


class FakeTime:
    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def clock(self) -> float:
        return self.now


def runner(time: FakeTime, messages: list[str]) -> BuildRunner:
    return BuildRunner(REGION, poll_seconds=15, sleep=time.sleep, clock=time.clock, report=messages.append)


MANIFEST = json.dumps(
    {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json", "layers": []}
)


def push(tag: str = TAG) -> str:
    """What the buildspec's push leaves behind: the image under its tag. Returns the digest."""
    pushed = boto3.client("ecr", region_name=REGION).put_image(
        repositoryName=REPO, imageManifest=MANIFEST, imageTag=tag
    )
    return pushed["image"]["imageId"]["imageDigest"]


def pushing_start(r: BuildRunner, sent: list[dict]):
    """start_build as CodeBuild runs it: moto completes the build; the push is done here."""
    start_build = r.codebuild.start_build

    def start(**kwargs):
        sent.append(kwargs)
        started = start_build(**kwargs)
        push({e["name"]: e["value"] for e in kwargs["environmentVariablesOverride"]}["IMAGE_TAG"])
        return started

    start.__name__ = "start_build"
    return start


def setup_project() -> None:
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName="cb", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    boto3.client("codebuild", region_name=REGION).create_project(
        name=PROJECT,
        source={"type": "S3", "location": "bucket/old.zip"},
        artifacts={"type": "NO_ARTIFACTS"},
        environment={
            "type": "LINUX_CONTAINER",
            "image": "aws/codebuild/standard:7.0",
            "computeType": "BUILD_GENERAL1_SMALL",
        },
        serviceRole=role,
    )
    boto3.client("ecr", region_name=REGION).create_repository(repositoryName=REPO)


def stub_no_running_build(stub: Stubber) -> None:
    stub.add_response("list_builds_for_project", {}, {"projectName": PROJECT, "sortOrder": "DESCENDING"})


def test_build_succeeds_and_returns_the_digest():
    setup_project()
    time, messages = FakeTime(), []
    r = runner(time, messages)
    sent: list[dict] = []
    r.codebuild.start_build = pushing_start(r, sent)
    result = r.build(inputs())
    detail = boto3.client("ecr", region_name=REGION).describe_images(
        repositoryName=REPO, imageIds=[{"imageTag": TAG}]
    )["imageDetails"][0]
    digest = detail["imageDigest"]
    assert result["image_uri"] == f"{inputs()['repository_url']}@{digest}"
    assert result["build_id"].startswith(f"{PROJECT}:")
    (request,) = sent
    assert request["sourceTypeOverride"] == "S3"
    assert request["sourceLocationOverride"] == inputs()["source_location"]
    env = {e["name"]: e["value"] for e in request["environmentVariablesOverride"]}
    assert env == {"IMAGE_TAG": TAG, "CONTEXT_DIR": "."}
    assert messages[0] == f"CodeBuild {result['build_id']} started for {TAG}"
    assert f"CodeBuild {result['build_id']}: COMPLETED" in messages
    # ECR's compressed size, as every new node pulls it.
    size = f"{detail['imageSizeInBytes'] / 1e9:.2f} GB compressed"
    assert messages[-1].endswith(f"pushed {result['image_uri']} ({size}, pulled by each new node)")


def test_an_existing_tag_is_reused_without_a_build():
    """A build pushed its tag but Pulumi never recorded it (Ctrl-C, a lost connection): with
    immutable tags a second build would fail with ImageTagAlreadyExistsException."""
    setup_project()
    digest = push()
    time, messages = FakeTime(), []
    r = runner(time, messages)
    sent: list[dict] = []
    r.codebuild.start_build = pushing_start(r, sent)
    result = r.build(inputs())
    assert sent == []
    assert result == {"build_id": "", "image_uri": f"{inputs()['repository_url']}@{digest}"}
    assert messages == [f"{inputs()['repository_url']}:{TAG} is already in ECR; reusing it"]


def test_a_running_build_of_the_same_tag_is_joined():
    setup_project()
    time, messages = FakeTime(), []
    r = runner(time, messages)
    sleep = time.sleep

    def sleep_while_the_build_pushes(seconds):
        sleep(seconds)
        if len(time.sleeps) == 1:
            push()

    r.sleep = sleep_while_the_build_pushes
    build_id = f"{PROJECT}:earlier"
    running = {
        "id": build_id,
        "buildStatus": "IN_PROGRESS",
        "currentPhase": "BUILD",
        "environment": {
            "type": "LINUX_CONTAINER",
            "image": "aws/codebuild/standard:7.0",
            "computeType": "BUILD_GENERAL1_SMALL",
            "environmentVariables": [{"name": "IMAGE_TAG", "value": TAG, "type": "PLAINTEXT"}],
        },
    }
    other = {
        **running,
        "id": f"{PROJECT}:other",
        "environment": {
            **running["environment"],
            "environmentVariables": [{"name": "IMAGE_TAG", "value": "build-other", "type": "PLAINTEXT"}],
        },
    }
    with Stubber(r.codebuild) as stub:
        stub.add_response("list_builds_for_project", {"ids": [f"{PROJECT}:other", build_id]})
        stub.add_response("batch_get_builds", {"builds": [other, running]})
        stub.add_response("batch_get_builds", {"builds": [running]})
        stub.add_response(
            "batch_get_builds",
            {"builds": [{**running, "buildStatus": "SUCCEEDED", "currentPhase": "COMPLETED"}]},
        )
        result = r.build(inputs())
        stub.assert_no_pending_responses()  # and no start_build
    assert result["build_id"] == build_id
    assert messages[0] == f"CodeBuild {build_id} is already building {TAG}; waiting for it"


def test_dropped_connections_while_polling_are_retried():
    setup_project()
    time, messages = FakeTime(), []
    r = runner(time, messages)
    real_get = r.codebuild.batch_get_builds
    failures = []

    def flaky_get(**kwargs):
        if len(failures) < 2:
            failures.append(1)
            raise botocore.exceptions.EndpointConnectionError(endpoint_url="https://codebuild")
        return real_get(**kwargs)

    flaky_get.__name__ = "batch_get_builds"
    r.codebuild.batch_get_builds = flaky_get
    r.codebuild.start_build = pushing_start(r, [])
    assert r.build(inputs())["image_uri"].startswith(inputs()["repository_url"] + "@sha256:")
    assert time.sleeps[:2] == [1.0, 2.0]
    assert any("batch_get_builds failed to reach AWS" in m for m in messages)


def test_credentials_of_another_account_are_refused():
    setup_project()
    r = runner(FakeTime(), [])
    r.codebuild.start_build = pushing_start(r, sent := [])
    with pytest.raises(
        BuildFailed, match="account 123456789012, but the stack deploys to account 210987654321"
    ):
        r.build(inputs(account_id="210987654321"))
    assert sent == []


def failed_build(build_id: str) -> dict:
    return {
        "id": build_id,
        "buildStatus": "FAILED",
        "currentPhase": "COMPLETED",
        "phases": [
            {"phaseType": "PRE_BUILD", "phaseStatus": "SUCCEEDED"},
            {
                "phaseType": "BUILD",
                "phaseStatus": "FAILED",
                "contexts": [
                    {
                        "statusCode": "COMMAND_EXECUTION_ERROR",
                        "message": "Error while executing command: docker run",
                    }
                ],
            },
        ],
        "logs": {"groupName": f"/aws/codebuild/{PROJECT}", "streamName": "run-1"},
    }


def test_failed_build_names_the_build_phase_logs_and_console():
    setup_project()
    logs = boto3.client("logs", region_name=REGION)
    logs.create_log_group(logGroupName=f"/aws/codebuild/{PROJECT}")
    logs.create_log_stream(logGroupName=f"/aws/codebuild/{PROJECT}", logStreamName="run-1")
    logs.put_log_events(
        logGroupName=f"/aws/codebuild/{PROJECT}",
        logStreamName="run-1",
        # Recent timestamps: CloudWatch (and moto) drop events older than the retention window.
        logEvents=[
            {"timestamp": int(wall_time.time() * 1000) + i, "message": f"line {i}"} for i in range(30)
        ],
    )
    time, messages = FakeTime(), []
    r = runner(time, messages)
    build_id = f"{PROJECT}:run-1"
    with Stubber(r.codebuild) as stub:
        stub_no_running_build(stub)
        stub.add_response(
            "start_build",
            {"build": {"id": build_id}},
            {
                "projectName": PROJECT,
                "sourceTypeOverride": "S3",
                "sourceLocationOverride": ANY,
                "environmentVariablesOverride": ANY,
            },
        )
        stub.add_response(
            "batch_get_builds",
            {"builds": [{"id": build_id, "buildStatus": "IN_PROGRESS", "currentPhase": "BUILD"}]},
        )
        stub.add_response("batch_get_builds", {"builds": [failed_build(build_id)]})
        with pytest.raises(BuildFailed) as err:
            r.build(inputs())
    text = str(err.value)
    assert text.startswith(
        f"CodeBuild {build_id} FAILED in phase BUILD: Error while executing command: docker run."
    )
    assert "line 29" in text and "line 10" in text and "line 9\n" not in text  # the last 20 lines
    assert (
        f"https://{REGION}.console.aws.amazon.com/codesuite/codebuild/projects/{PROJECT}/build/{PROJECT}%3Arun-1/"
        in text
    )
    assert "nothing was pushed" in text
    assert time.sleeps == [15]
    assert f"CodeBuild {build_id}: BUILD" in messages


def test_build_timeout_stops_the_build():
    setup_project()
    time, messages = FakeTime(), []
    r = runner(time, messages)
    build_id = f"{PROJECT}:run-2"
    in_progress = {"builds": [{"id": build_id, "buildStatus": "IN_PROGRESS", "currentPhase": "BUILD"}]}
    with Stubber(r.codebuild) as stub:
        stub_no_running_build(stub)
        stub.add_response("start_build", {"build": {"id": build_id}})
        for _ in range(5):  # t = 0, 15, 30, 45, 60 s: the last one is past the 1-minute timeout
            stub.add_response("batch_get_builds", in_progress)
        stub.add_response("stop_build", {"build": {"id": build_id}}, {"id": build_id})
        with pytest.raises(BuildFailed) as err:
            r.build(inputs(timeout_minutes=1))
        stub.assert_no_pending_responses()
    assert str(err.value).startswith(f"CodeBuild {build_id} was still BUILD after 1 minutes and was stopped.")
    assert "trainstack:image.buildTimeoutMinutes" in str(err.value)


def test_throttling_is_retried_with_backoff():
    setup_project()
    time, messages = FakeTime(), []
    r = runner(time, messages)
    real_start = pushing_start(r, [])
    calls = []

    def flaky_start(**kwargs):
        calls.append(kwargs)
        if len(calls) <= 2:
            with Stubber(r.codebuild) as stub:
                stub.add_client_error("start_build", "ThrottlingException", "Rate exceeded")
                return real_start(**kwargs)
        return real_start(**kwargs)

    flaky_start.__name__ = "start_build"
    r.codebuild.start_build = flaky_start
    result = r.build(inputs())
    assert len(calls) == 3
    assert time.sleeps[:2] == [1.0, 2.0]
    assert result["image_uri"].startswith(inputs()["repository_url"] + "@sha256:")
    assert "AWS throttled start_build (ThrottlingException); retrying in 1s" in messages


def test_throttling_gives_up_after_max_retries():
    setup_project()
    time, messages = FakeTime(), []
    r = BuildRunner(REGION, max_retries=2, sleep=time.sleep, clock=time.clock, report=messages.append)
    with Stubber(r.codebuild) as stub:
        stub_no_running_build(stub)
        for _ in range(3):
            stub.add_client_error("start_build", "ThrottlingException", "Rate exceeded")
        with pytest.raises(Exception, match="ThrottlingException"):
            r.build(inputs())
    assert time.sleeps == [1.0, 2.0]


def test_other_errors_are_not_retried():
    setup_project()
    time = FakeTime()
    r = BuildRunner(REGION, sleep=time.sleep, clock=time.clock, report=lambda m: None)
    with pytest.raises(botocore.exceptions.ClientError, match="ResourceNotFoundException"):
        r.build(inputs(project_name="missing"))
    assert time.sleeps == []


class Recorder:
    builds: ClassVar[list[dict]] = []

    def __init__(self, region, profile=None):
        self.region, self.profile = region, profile

    def build(self, props):
        Recorder.builds.append(props)
        return {"build_id": f"{PROJECT}:new", "image_uri": f"repo@sha256:{props['image_tag']}"}


@pytest.fixture
def recorded_builds(monkeypatch):
    Recorder.builds = []
    monkeypatch.setattr(build_trigger, "BuildRunner", Recorder)
    return Recorder.builds


def test_unchanged_hash_starts_nothing(recorded_builds):
    old = {**inputs(), "build_id": f"{PROJECT}:old", "image_uri": "repo@sha256:old"}
    provider = ImageBuildProvider()
    new = inputs(timeout_minutes=90)  # not a build input
    assert provider.diff("id", old, inputs()).changes is False
    assert provider.diff("id", old, new).changes is True
    result = provider.update("id", old, new)
    assert recorded_builds == []
    assert result.outs["image_uri"] == "repo@sha256:old" and result.outs["timeout_minutes"] == 90


@pytest.mark.parametrize(
    ("changed", "value"),
    [
        ("image_tag", "build-" + "c" * 64),
        # A replaced registry or another region: the old image_uri points into a deleted repository.
        ("repository_url", f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/trainstack/dev/training2"),
        ("region", "us-west-2"),
    ],
)
def test_changed_build_input_starts_a_build(recorded_builds, changed, value):
    old = {**inputs(), "build_id": f"{PROJECT}:old", "image_uri": "repo@sha256:old"}
    new = inputs(**{changed: value})
    result = ImageBuildProvider().update("id", old, new)
    assert len(recorded_builds) == 1
    assert result.outs["build_id"] == f"{PROJECT}:new"


def test_create_builds_once(recorded_builds):
    result = ImageBuildProvider().create(inputs())
    assert result.id == f"{PROJECT}/{TAG}"
    assert len(recorded_builds) == 1 and result.outs["image_uri"] == f"repo@sha256:{TAG}"
