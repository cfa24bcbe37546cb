"""The deploy job's side of `ci.runner: codebuild` (.github/in_vpc_up.py): it starts the project's
build at the job's commit with the backend, prints the build's log as CloudWatch has it, page by
page, and ends the job with the build's outcome, naming the failed phase and its reason. The clients
answer as CodeBuild's StartBuild and BatchGetBuilds and CloudWatch Logs' GetLogEvents document."""

from __future__ import annotations

import importlib.util
import time

import pytest
from support.paths import ROOT

spec = importlib.util.spec_from_file_location("in_vpc_up", ROOT / ".github" / "in_vpc_up.py")
in_vpc_up = importlib.util.module_from_spec(spec)
spec.loader.exec_module(in_vpc_up)

ENV = {
    "CI_RUNNER_PROJECT": "trainstack-prod-github-runner",
    "GITHUB_SHA": "a" * 40,
    "PULUMI_BACKEND_URL": "s3://acme-pulumi-state?region=us-east-1&awssdk=v2",
}
LOGS = {"groupName": "/aws/codebuild/trainstack-prod-github-runner", "streamName": "b-1"}


class NotFound(Exception):
    pass


class Logs:
    """GetLogEvents over a stream that grows: each call returns what came since the token."""

    exceptions = type("exceptions", (), {"ResourceNotFoundException": NotFound})

    def __init__(self, pages: list[list[str]]):
        self.pages, self.asked = pages, []

    def get_log_events(self, **ask):
        self.asked.append(ask)
        at = int(ask.get("nextToken", "f/0").split("/")[1])
        events = self.pages[at] if at < len(self.pages) else []
        return {
            "events": [{"message": m + "\n"} for m in events],
            "nextForwardToken": f"f/{min(at + 1, len(self.pages))}",
        }


class CodeBuild:
    def __init__(self, states: list[dict], earlier: list[dict] | None = None):
        self.states, self.started, self.stopped = states, [], []
        self.earlier = earlier or []  # the project's builds before this job's

    def list_builds_for_project(self, projectName, sortOrder):
        return {"ids": [b["id"] for b in self.earlier]}

    def stop_build(self, id):
        self.stopped.append(id)
        return {"build": {"id": id}}

    def start_build(self, **ask):
        self.started.append(ask)
        return {"build": {"id": "trainstack-prod-github-runner:b-1", "buildStatus": "IN_PROGRESS"}}

    def batch_get_builds(self, ids):
        if ids and ids[0].endswith(":earlier"):
            return {"builds": self.earlier}
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return {"builds": [{"id": ids[0], "logs": LOGS, **state}]}


def run(states, pages):
    said, codebuild, logs = [], CodeBuild(states), Logs(pages)
    code = in_vpc_up.run(codebuild, logs, dict(ENV), said.append, sleep=lambda _: None)
    return code, said, codebuild


def test_a_build_that_succeeds_is_followed_to_its_end_and_passes():
    states = [
        {"buildComplete": False},
        {"buildComplete": False},
        {"buildComplete": True, "buildStatus": "SUCCEEDED"},
    ]
    code, said, codebuild = run(states, [["Updating (prod):"], ["  + 3 created"], ["Resources: 3 created"]])
    assert code == 0
    assert codebuild.started == [
        {
            "projectName": "trainstack-prod-github-runner",
            "sourceVersion": "a" * 40,
            "environmentVariablesOverride": [
                {"name": "PULUMI_BACKEND_URL", "value": ENV["PULUMI_BACKEND_URL"], "type": "PLAINTEXT"}
            ],
        }
    ]
    assert said == [
        "build trainstack-prod-github-runner:b-1 of trainstack-prod-github-runner at aaaaaaaaaaaa",
        "Updating (prod):",
        "  + 3 created",
        "Resources: 3 created",
    ]


def test_a_failed_build_fails_the_job_naming_its_phase_and_reason():
    failed = {
        "buildComplete": True,
        "buildStatus": "FAILED",
        "phases": [
            {"phaseType": "INSTALL", "phaseStatus": "SUCCEEDED"},
            {
                "phaseType": "BUILD",
                "phaseStatus": "FAILED",
                "contexts": [
                    {
                        "statusCode": "COMMAND_EXECUTION_ERROR",
                        "message": "Error while executing command: pulumi up. Reason: exit status 255",
                    }
                ],
            },
        ],
    }
    code, said, _ = run([failed], [["error: update failed"]])
    assert code == 1
    assert said[-1] == (
        "::error::build trainstack-prod-github-runner:b-1 ended FAILED in its BUILD phase: Error while executing "
        "command: pulumi up. Reason: exit status 255"
    )


def test_a_pulumi_cloud_backend_is_refused_before_any_build():
    said, codebuild = [], CodeBuild([{"buildComplete": True, "buildStatus": "SUCCEEDED"}])
    code = in_vpc_up.run(
        codebuild, Logs([]), {**ENV, "PULUMI_BACKEND_URL": ""}, said.append, sleep=lambda _: None
    )
    assert (code, codebuild.started) == (1, [])
    assert said == [
        "::error::PULUMI_BACKEND_URL is empty: the in-VPC deploy runs on the self-managed S3 backend only "
        "(ci.runner: codebuild, docs/ci.md)"
    ]


def test_a_build_still_running_is_named_and_none_is_started():
    """The project runs one build at a time: a cancelled deploy's build going on is said, with the
    command that stops it, instead of StartBuild's refusal as a traceback."""
    earlier = [{"id": "trainstack-prod-github-runner:earlier", "buildComplete": False}]
    said, codebuild = [], CodeBuild([{"buildComplete": True, "buildStatus": "SUCCEEDED"}], earlier)
    code = in_vpc_up.run(codebuild, Logs([]), dict(ENV), said.append, sleep=lambda _: None)
    assert (code, codebuild.started) == (1, [])
    assert said == [
        "::error::trainstack-prod-github-runner is still running build trainstack-prod-github-runner:earlier (a "
        "cancelled deploy's `pulumi up` goes on in CodeBuild, and the project runs one at a time): wait for it, "
        "or stop it with aws codebuild stop-build --id trainstack-prod-github-runner:earlier and run this job again"
    ]


def test_a_cancelled_job_stops_its_build():
    """GitHub cancels a step with SIGINT, then SIGTERM: the build is stopped, not left running."""
    import os
    import signal

    said, codebuild = [], CodeBuild([])
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        in_vpc_up.stop_on_cancel(codebuild, "trainstack-prod-github-runner:b-1", said.append)
        with pytest.raises(SystemExit) as ended:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the signal arrives before this ends
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert ended.value.code == 128 + signal.SIGTERM
    assert codebuild.stopped == ["trainstack-prod-github-runner:b-1"]
    assert said == [
        "::warning::job cancelled: stopping build trainstack-prod-github-runner:b-1 (its `pulumi up` ends where it is)"
    ]
