"""The world outside the program, as the stack reaches it: AWS sessions for what Pulumi has no data
source for, a Kubernetes client for a cluster the stack did not create, the `aws` CLI on this
machine, and whether a placeholder value may go through. `pulumi up` meets the real world
(`real_world`); the offline plan runs the same program in its own (offline/engine/world.py), so no
product module asks whether it is being mocked."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import boto3

from account_checks.aws_cli import cli_version, installed_cli_check
from account_checks.cluster_access import KubeClients, live_clients
from account_checks.report import Check
from config import StackConfig


@dataclass(frozen=True)
class World:
    aws_session: Callable[[str | None, str], Any]  # (profile, region) -> a boto3 Session
    # (the stack's AWS session factory) -> the client factory for a cluster the stack did not create
    kubernetes_clients: Callable[[Callable[[], Any]], KubeClients]
    aws_cli: Callable[[], Check]  # the aws CLI on the machine that runs Pulumi, checked
    # What the offline plan lists as a warning stops the program: a template's placeholder (203.0.113.0/24),
    # a dataset file the bucket lacks, a machine whose kind nodes cannot run the image.
    strict: bool

    def session(self, cfg: StackConfig) -> Callable[[], Any]:
        """The stack's AWS session, made only when a check needs it: its region and profile, as the
        provider uses."""
        return lambda: self.aws_session(cfg.aws_profile, cfg.region)


def real_world() -> World:
    return World(
        aws_session=lambda profile, region: boto3.Session(profile_name=profile, region_name=region),
        kubernetes_clients=live_clients,
        aws_cli=lambda: installed_cli_check(shutil.which, cli_version),
        strict=True,
    )
