"""Start a CodeBuild build from `pulumi up`, wait for it and output the pushed image by digest.

A Pulumi dynamic provider backed by boto3. A build starts on create, and on update only when the
build context hash or the buildspec hash changed: any other change (a longer timeout, say) is
taken in place without a build. Deleting the resource leaves the image in ECR.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import boto3
import botocore.config
import botocore.exceptions
import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider, UpdateResult

# Inputs whose change means a new image; nothing else starts a build.
BUILD_INPUTS = ("context_hash", "buildspec_hash")
THROTTLING_CODES = {
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "ProvisionedThroughputExceededException",
}
FAILED_STATES = {"FAILED", "FAULT", "TIMED_OUT", "STOPPED"}
LOG_TAIL_LINES = 20


class BuildFailed(Exception):
    """A build ended without pushing an image; the message says where to look."""


@dataclass
class BuildRunner:
    """The boto3 side, separate from Pulumi so it can be tested against moto and Stubber."""

    region: str
    poll_seconds: float = 15.0
    max_retries: int = 8
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    report: Callable[[str], None] = field(default=lambda msg: pulumi.log.info(msg))

    def __post_init__(self) -> None:
        # Own retries below, so botocore's own do not multiply with them.
        cfg = botocore.config.Config(region_name=self.region, retries={"max_attempts": 1, "mode": "standard"})
        self.codebuild = boto3.client("codebuild", config=cfg)
        self.ecr = boto3.client("ecr", config=cfg)
        self.logs = boto3.client("logs", config=cfg)

    def call(self, fn: Callable[..., dict], **kwargs: Any) -> dict:
        """Call an AWS API, retrying throttling with exponential backoff (1 s, 2 s, 4 s, ...)."""
        for attempt in range(self.max_retries + 1):
            try:
                return fn(**kwargs)
            except botocore.exceptions.ClientError as err:
                code = err.response.get("Error", {}).get("Code", "")
                if code not in THROTTLING_CODES or attempt == self.max_retries:
                    raise
                delay = min(2.0**attempt, 60.0)
                self.report(f"AWS throttled {fn.__name__} ({code}); retrying in {delay:.0f}s")
                self.sleep(delay)
        raise AssertionError("unreachable")

    def build(self, inputs: dict[str, Any]) -> dict[str, str]:
        """Start a build for `inputs`, wait for it, return {buildId, imageUri}."""
        project = inputs["project_name"]
        tag = inputs["context_hash"]
        started = self.call(
            self.codebuild.start_build,
            projectName=project,
            sourceTypeOverride="S3",
            sourceLocationOverride=inputs["source_location"],
            environmentVariablesOverride=[
                {"name": "IMAGE_TAG", "value": tag, "type": "PLAINTEXT"},
                {"name": "CONTEXT_DIR", "value": ".", "type": "PLAINTEXT"},
            ],
        )
        build_id = started["build"]["id"]
        self.report(f"CodeBuild {build_id} started for context {tag[:12]}")
        build = self.wait(build_id, float(inputs["timeout_minutes"]) * 60)
        status = build["buildStatus"]
        if status != "SUCCEEDED":
            raise BuildFailed(self.failure_message(build))
        digest = self.image_digest(inputs["repository_name"], tag)
        image_uri = f"{inputs['repository_url']}@{digest}"
        self.report(f"CodeBuild {build_id} pushed {image_uri}")
        return {"build_id": build_id, "image_uri": image_uri}

    def wait(self, build_id: str, timeout_s: float) -> dict:
        deadline = self.clock() + timeout_s
        last_phase = None
        while True:
            build = self.call(self.codebuild.batch_get_builds, ids=[build_id])["builds"][0]
            phase = build.get("currentPhase")
            if phase != last_phase:
                self.report(f"CodeBuild {build_id}: {phase}")
                last_phase = phase
            if build["buildStatus"] != "IN_PROGRESS":
                return build
            if self.clock() >= deadline:
                self.call(self.codebuild.stop_build, id=build_id)
                raise BuildFailed(
                    f"CodeBuild {build_id} was still {phase} after {timeout_s / 60:.0f} minutes and was stopped. "
                    f"Raise trainstack:image.buildTimeoutMinutes or look at the build: {self.console_link(build_id)}"
                )
            self.sleep(self.poll_seconds)

    def image_digest(self, repository: str, tag: str) -> str:
        found = self.call(self.ecr.describe_images, repositoryName=repository, imageIds=[{"imageTag": tag}])
        return found["imageDetails"][0]["imageDigest"]

    def failure_message(self, build: dict) -> str:
        build_id = build["id"]
        failed = next(
            (p for p in build.get("phases", []) if p.get("phaseStatus") in FAILED_STATES),
            {"phaseType": build.get("currentPhase", "UNKNOWN"), "contexts": []},
        )
        reasons = "; ".join(c.get("message", "") for c in failed.get("contexts", []) if c.get("message"))
        lines = self.log_tail(build)
        tail = "\n".join(f"    {line}" for line in lines) or "    (no log lines found)"
        return (
            f"CodeBuild {build_id} {build['buildStatus']} in phase {failed['phaseType']}"
            f"{': ' + reasons if reasons else ''}.\n"
            f"  Last log lines:\n{tail}\n"
            f"  Console: {self.console_link(build_id)}\n"
            "  Fix the image or buildspec and run `pulumi up` again; nothing was pushed."
        )

    def log_tail(self, build: dict) -> list[str]:
        logs = build.get("logs", {})
        group, stream = logs.get("groupName"), logs.get("streamName")
        if not group or not stream:
            return []
        try:
            events = self.call(
                self.logs.get_log_events,
                logGroupName=group,
                logStreamName=stream,
                limit=LOG_TAIL_LINES,
                startFromHead=False,
            )["events"]
        except botocore.exceptions.ClientError:
            return []
        return [e["message"].rstrip() for e in events]

    def console_link(self, build_id: str) -> str:
        project, _, run = build_id.partition(":")
        return (
            f"https://{self.region}.console.aws.amazon.com/codesuite/codebuild/projects/"
            f"{project}/build/{project}%3A{run}/?region={self.region}"
        )


class ImageBuildProvider(ResourceProvider):
    def create(self, props: dict[str, Any]) -> CreateResult:
        result = BuildRunner(props["region"]).build(props)
        return CreateResult(id_=f"{props['project_name']}/{props['context_hash']}", outs={**props, **result})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in news if k != "__provider" and olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        if needs_build(olds, news):
            return UpdateResult(outs={**news, **BuildRunner(news["region"]).build(news)})
        return UpdateResult(outs={**news, "build_id": olds["build_id"], "image_uri": olds["image_uri"]})


def needs_build(olds: dict[str, Any], news: dict[str, Any]) -> bool:
    return any(olds.get(k) != news.get(k) for k in BUILD_INPUTS)


class ImageBuildTrigger(pulumi.dynamic.Resource):
    image_uri: pulumi.Output[str]
    build_id: pulumi.Output[str]

    def __init__(
        self, name: str, props: dict[str, pulumi.Input[Any]], opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__(ImageBuildProvider(), name, {**props, "image_uri": None, "build_id": None}, opts)
