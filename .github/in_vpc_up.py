"""Runs the deploy's `pulumi up` inside the stack's VPC (`ci.runner: codebuild`): starts a build of
the stack's CodeBuild project (output ciRunnerProject, components/ci_runner.py) at this job's commit,
as the deploy role the job has taken, prints the build's log as it comes, and fails the job, with one
line, unless the build succeeded.

Environment: CI_RUNNER_PROJECT (the project), GITHUB_SHA (the commit, main's head:
main_head_check.py ran first), PULUMI_BACKEND_URL (the self-managed backend the build logs in to),
and the AWS credentials and region of the job."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

POLL_SECONDS = 15
DONE = "buildComplete"


def start(codebuild: Any, project: str, commit: str, backend: str) -> str:
    build = codebuild.start_build(
        projectName=project,
        sourceVersion=commit,
        environmentVariablesOverride=[{"name": "PULUMI_BACKEND_URL", "value": backend, "type": "PLAINTEXT"}],
    )["build"]
    return build["id"]


def running_builds(codebuild: Any, project: str) -> list[str]:
    """The project's builds still in progress (its limit is one: StartBuild refuses a second)."""
    ids = codebuild.list_builds_for_project(projectName=project, sortOrder="DESCENDING")["ids"][:10]
    builds = codebuild.batch_get_builds(ids=ids)["builds"] if ids else []
    return [b["id"] for b in builds if not b.get(DONE)]


def new_log_lines(logs: Any, build: dict, token: str | None) -> tuple[list[str], str | None]:
    """The log lines since `token` (CloudWatch's forward token), and the next token."""
    where = build.get("logs") or {}
    if not where.get("groupName") or not where.get("streamName"):
        return [], token  # the build has not started logging yet
    ask = {"logGroupName": where["groupName"], "logStreamName": where["streamName"], "startFromHead": True}
    if token:
        ask["nextToken"] = token
    try:
        page = logs.get_log_events(**ask)
    except logs.exceptions.ResourceNotFoundException:
        return [], token  # the stream is made with the build's first line
    return [e["message"].rstrip("\n") for e in page["events"]], page["nextForwardToken"]


def run(codebuild: Any, logs: Any, env: dict[str, str], say: Callable[[str], None], sleep=time.sleep) -> int:
    """Starts the build and follows it to its end; the job's exit code."""
    project, commit = env["CI_RUNNER_PROJECT"], env["GITHUB_SHA"]
    backend = env.get("PULUMI_BACKEND_URL", "")
    if not backend.startswith("s3://"):
        say(
            f"::error::PULUMI_BACKEND_URL is {backend or 'empty'}: the in-VPC deploy runs on the self-managed "
            "S3 backend only (ci.runner: codebuild, docs/ci.md)"
        )
        return 1
    busy = running_builds(codebuild, project)
    if busy:
        say(
            f"::error::{project} is still running build {busy[0]} (a cancelled deploy's `pulumi up` goes on in "
            "CodeBuild, and the project runs one at a time): wait for it, or stop it with aws codebuild "
            f"stop-build --id {busy[0]} and run this job again"
        )
        return 1
    build_id = start(codebuild, project, commit, backend)
    say(f"build {build_id} of {project} at {commit[:12]}")
    stop_on_cancel(codebuild, build_id, say)
    token = None
    while True:
        (build,) = codebuild.batch_get_builds(ids=[build_id])["builds"]
        lines, token = new_log_lines(logs, build, token)
        for line in lines:
            say(line)
        if build.get(DONE):
            break
        sleep(POLL_SECONDS)
    for line in new_log_lines(logs, build, token)[0]:  # what came between the last read and the end
        say(line)
    status = build["buildStatus"]
    if status == "SUCCEEDED":
        return 0
    failed = next(
        (p for p in build.get("phases") or [] if p.get("phaseStatus") not in (None, "SUCCEEDED")), {}
    )
    why = "; ".join(c.get("message", "") for c in failed.get("contexts") or [] if c.get("message"))
    say(
        f"::error::build {build_id} ended {status} in its {failed.get('phaseType', 'last')} phase: {why or 'see its log above'}"
    )
    return 1


def stop_on_cancel(codebuild: Any, build_id: str, say: Callable[[str], None]) -> None:
    """A cancelled job (GitHub sends SIGINT, then SIGTERM) stops its build instead of leaving a
    `pulumi up` running that nobody follows and that holds the project's one build."""

    def stop(signum, _frame) -> None:
        say(f"::warning::job cancelled: stopping build {build_id} (its `pulumi up` ends where it is)")
        codebuild.stop_build(id=build_id)
        sys.exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop)


if __name__ == "__main__":
    import boto3

    sys.exit(run(boto3.client("codebuild"), boto3.client("logs"), dict(os.environ), print))
