"""Start a CodeBuild build from `pulumi up`, wait for it and output the pushed image by digest.

A Pulumi dynamic provider backed by boto3. A build is needed on create, and on update only when
the image tag (a hash of every build input), the registry or the region changed: any other change
(a longer timeout, say) is taken in place without a build. Builds are idempotent: a tag already
in ECR is reused (a build whose result Pulumi never recorded), and a build of the same tag still
running is joined rather than started twice. Deleting the resource leaves the image in ECR.

The boto3 clients use the stack's region and `aws:profile`, and refuse to run in any account but
the one the stack's AWS provider deploys to.
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

# Inputs whose change means a new image (or the old one is out of reach); nothing else builds.
# The target is part of the tag's hash (components/image.py image_tag).
BUILD_INPUTS = ("image_tag", "repository_url", "region")
THROTTLING_CODES = {
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "ProvisionedThroughputExceededException",
}
# Connection failures while polling a build that runs on are retried like throttling.
NETWORK_ERRORS = (
    botocore.exceptions.ConnectionError,
    botocore.exceptions.HTTPClientError,
)
FAILED_STATES = {"FAILED", "FAULT", "TIMED_OUT", "STOPPED"}
LOG_TAIL_LINES = 20


class BuildFailed(Exception):
    """A build ended without pushing an image; the message says where to look."""


@dataclass
class BuildRunner:
    """The boto3 side, separate from Pulumi so it can be tested against moto and Stubber."""

    region: str
    profile: str | None = None
    poll_seconds: float = 15.0
    max_retries: int = 8
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], float] = time.monotonic
    report: Callable[[str], None] = field(default=lambda msg: pulumi.log.info(msg))

    def __post_init__(self) -> None:
        # Own retries below, so botocore's own do not multiply with them.
        cfg = botocore.config.Config(region_name=self.region, retries={"max_attempts": 1, "mode": "standard"})
        session = boto3.Session(profile_name=self.profile, region_name=self.region)
        self.codebuild = session.client("codebuild", config=cfg)
        self.ecr = session.client("ecr", config=cfg)
        self.logs = session.client("logs", config=cfg)
        self.sts = session.client("sts", config=cfg)

    def call(self, fn: Callable[..., dict], **kwargs: Any) -> dict:
        """Call an AWS API, retrying throttling and dropped connections with exponential backoff
        (1 s, 2 s, 4 s, ...)."""
        for attempt in range(self.max_retries + 1):
            try:
                return fn(**kwargs)
            except botocore.exceptions.ClientError as err:
                code = err.response.get("Error", {}).get("Code", "")
                if code not in THROTTLING_CODES or attempt == self.max_retries:
                    raise
                reason = f"AWS throttled {fn.__name__} ({code})"
            except NETWORK_ERRORS as err:
                if attempt == self.max_retries:
                    raise
                reason = f"{fn.__name__} failed to reach AWS ({err})"
            delay = min(2.0**attempt, 60.0)
            self.report(f"{reason}; retrying in {delay:.0f}s")
            self.sleep(delay)
        raise AssertionError("unreachable")

    def check_account(self, expected: str) -> None:
        """Refuse to build anywhere but the stack's account (boto3 and the Pulumi AWS provider
        resolve credentials separately)."""
        actual = self.call(self.sts.get_caller_identity)["Account"]
        if actual != expected:
            raise BuildFailed(
                f"The image build's AWS credentials are for account {actual}, but the stack deploys to "
                f"account {expected}. Point both at one account: the same AWS_PROFILE (or `aws:profile` "
                "in the stack config) and credentials for `pulumi up` and the build."
            )

    def build(self, inputs: dict[str, Any]) -> dict[str, str]:
        """Make sure the image for `inputs` is in ECR and return {build_id, image_uri}: reuse an
        existing tag, join a build of that tag still running, or start one and wait for it."""
        self.check_account(inputs["account_id"])
        tag = inputs["image_tag"]
        existing = self.image_digest(inputs["repository_name"], tag)
        if existing:
            self.report(f"{inputs['repository_url']}:{tag} is already in ECR; reusing it")
            return {"build_id": "", "image_uri": f"{inputs['repository_url']}@{existing}"}
        build_id = self.running_build(inputs["project_name"], tag)
        if build_id:
            self.report(f"CodeBuild {build_id} is already building {tag}; waiting for it")
        else:
            build_id = self.start(inputs)
        build = self.wait(build_id, float(inputs["timeout_minutes"]) * 60)
        status = build["buildStatus"]
        if status != "SUCCEEDED":
            raise BuildFailed(self.failure_message(build))
        detail = self.image_detail(inputs["repository_name"], tag)
        digest = detail and detail["imageDigest"]
        if not digest:
            raise BuildFailed(
                f"CodeBuild {build_id} succeeded but {inputs['repository_url']}:{tag} is not in ECR. "
                f"Look at the build's post_build phase: {self.console_link(build_id)}"
            )
        image_uri = f"{inputs['repository_url']}@{digest}"
        # ECR's size is the compressed layers': what every fresh GPU node pulls before a job starts.
        size_gb = detail.get("imageSizeInBytes", 0) / 1e9
        self.report(
            f"CodeBuild {build_id} pushed {image_uri} ({size_gb:.2f} GB compressed, pulled by each new node)"
        )
        return {"build_id": build_id, "image_uri": image_uri}

    def start(self, inputs: dict[str, Any]) -> str:
        tag = inputs["image_tag"]
        started = self.call(
            self.codebuild.start_build,
            projectName=inputs["project_name"],
            sourceTypeOverride="S3",
            sourceLocationOverride=inputs["source_location"],
            environmentVariablesOverride=[
                {"name": "IMAGE_TAG", "value": tag, "type": "PLAINTEXT"},
                {"name": "CONTEXT_DIR", "value": ".", "type": "PLAINTEXT"},
                # The Dockerfile stage, training or verl; without one buildspec.yml builds training.
                *(
                    [{"name": "TARGET", "value": inputs["target"], "type": "PLAINTEXT"}]
                    if "target" in inputs
                    else []
                ),
            ],
        )
        build_id = started["build"]["id"]
        self.report(f"CodeBuild {build_id} started for {tag}")
        return build_id

    def running_build(self, project: str, tag: str) -> str | None:
        """A build of `tag` still in progress (say, from a `pulumi up` that was interrupted)."""
        ids = self.call(self.codebuild.list_builds_for_project, projectName=project, sortOrder="DESCENDING")
        recent = ids.get("ids", [])[:20]
        if not recent:
            return None
        for build in self.call(self.codebuild.batch_get_builds, ids=recent)["builds"]:
            env = build.get("environment", {}).get("environmentVariables", [])
            if build.get("buildStatus") == "IN_PROGRESS" and {"name": "IMAGE_TAG", "value": tag} in [
                {"name": v.get("name"), "value": v.get("value")} for v in env
            ]:
                return build["id"]
        return None

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

    def image_digest(self, repository: str, tag: str) -> str | None:
        detail = self.image_detail(repository, tag)
        return detail["imageDigest"] if detail else None

    def image_detail(self, repository: str, tag: str) -> dict | None:
        try:
            found = self.call(
                self.ecr.describe_images, repositoryName=repository, imageIds=[{"imageTag": tag}]
            )
        except botocore.exceptions.ClientError as err:
            if err.response.get("Error", {}).get("Code") == "ImageNotFoundException":
                return None
            raise
        return found["imageDetails"][0]

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
        result = BuildRunner(props["region"], props.get("aws_profile")).build(props)
        return CreateResult(id_=f"{props['project_name']}/{props['image_tag']}", outs={**props, **result})

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> DiffResult:
        changed = [k for k in news if k != "__provider" and olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(changed), replaces=[], delete_before_replace=False)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> UpdateResult:
        if needs_build(olds, news):
            return UpdateResult(
                outs={**news, **BuildRunner(news["region"], news.get("aws_profile")).build(news)}
            )
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
