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
        "context_hash": HASH,
        "buildspec_hash": "b" * 64,
        "repository_url": f"123456789012.dkr.ecr.{REGION}.amazonaws.com/{REPO}",
        "repository_name": REPO,
        "timeout_minutes": 60,
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


def setup_project_and_image() -> str:
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
    ecr = boto3.client("ecr", region_name=REGION)
    ecr.create_repository(repositoryName=REPO)
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
            "layers": [],
        }
    )
    # What the buildspec's push leaves behind: the image tagged with the context hash.
    pushed = ecr.put_image(repositoryName=REPO, imageManifest=manifest, imageTag=HASH)
    return pushed["image"]["imageId"]["imageDigest"]


def test_build_succeeds_and_returns_the_digest():
    digest = setup_project_and_image()
    time, messages = FakeTime(), []
    r = runner(time, messages)
    sent = []
    start_build = r.codebuild.start_build

    def spy(**kwargs):
        sent.append(kwargs)
        return start_build(**kwargs)

    spy.__name__ = "start_build"
    r.codebuild.start_build = spy
    result = r.build(inputs())
    assert result["image_uri"] == f"{inputs()['repository_url']}@{digest}"
    assert result["build_id"].startswith(f"{PROJECT}:")
    (request,) = sent
    assert request["sourceTypeOverride"] == "S3"
    assert request["sourceLocationOverride"] == inputs()["source_location"]
    env = {e["name"]: e["value"] for e in request["environmentVariablesOverride"]}
    assert env == {"IMAGE_TAG": HASH, "CONTEXT_DIR": "."}
    assert messages[0] == f"CodeBuild {result['build_id']} started for context {HASH[:12]}"
    assert f"CodeBuild {result['build_id']}: COMPLETED" in messages
    assert messages[-1].endswith(f"pushed {result['image_uri']}")


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
    time, messages = FakeTime(), []
    r = runner(time, messages)
    build_id = f"{PROJECT}:run-2"
    in_progress = {"builds": [{"id": build_id, "buildStatus": "IN_PROGRESS", "currentPhase": "BUILD"}]}
    with Stubber(r.codebuild) as stub:
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
    digest = setup_project_and_image()
    time, messages = FakeTime(), []
    r = runner(time, messages)
    real_start = r.codebuild.start_build
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
    assert result["image_uri"].endswith(digest)
    assert "AWS throttled start_build (ThrottlingException); retrying in 1s" in messages


def test_throttling_gives_up_after_max_retries():
    time, messages = FakeTime(), []
    r = BuildRunner(REGION, max_retries=2, sleep=time.sleep, clock=time.clock, report=messages.append)
    with Stubber(r.codebuild) as stub:
        for _ in range(3):
            stub.add_client_error("start_build", "ThrottlingException", "Rate exceeded")
        with pytest.raises(Exception, match="ThrottlingException"):
            r.build(inputs())
    assert time.sleeps == [1.0, 2.0]


def test_other_errors_are_not_retried():
    time = FakeTime()
    r = BuildRunner(REGION, sleep=time.sleep, clock=time.clock, report=lambda m: None)
    with pytest.raises(botocore.exceptions.ClientError, match="ResourceNotFoundException"):
        r.build(inputs(project_name="missing"))
    assert time.sleeps == []


class Recorder:
    builds: ClassVar[list[dict]] = []

    def __init__(self, region):
        self.region = region

    def build(self, props):
        Recorder.builds.append(props)
        return {"build_id": f"{PROJECT}:new", "image_uri": f"repo@sha256:{props['context_hash']}"}


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


@pytest.mark.parametrize("changed", ["context_hash", "buildspec_hash"])
def test_changed_hash_starts_a_build(recorded_builds, changed):
    old = {**inputs(), "build_id": f"{PROJECT}:old", "image_uri": "repo@sha256:old"}
    new = inputs(**{changed: "c" * 64})
    result = ImageBuildProvider().update("id", old, new)
    assert len(recorded_builds) == 1
    assert result.outs["build_id"] == f"{PROJECT}:new"


def test_create_builds_once(recorded_builds):
    result = ImageBuildProvider().create(inputs())
    assert result.id == f"{PROJECT}/{HASH}"
    assert len(recorded_builds) == 1 and result.outs["image_uri"] == f"repo@sha256:{HASH}"
