"""The world the offline plan runs the program in (account_checks.world's `World`): boto3 sessions
whose calls the offline account answers (runner.py puts its answers in place), Kubernetes clients
whose requests the offline cluster answers (cluster_answers.py), the aws CLI reported rather than
run (this machine may never run `pulumi up`), and what `pulumi up` refuses (template values, dataset files the bucket lacks, a machine kind
cannot serve) planned with a warning instead."""

from __future__ import annotations

import shutil

import boto3

from account_checks.aws_cli import AWS_CLI_NEEDS
from account_checks.report import Check
from account_checks.world import World
from offline.engine.cluster_answers import OfflineCluster


def reported_aws_cli() -> Check:
    where = shutil.which("aws")
    return Check("aws CLI", AWS_CLI_NEEDS, f"{where or 'not on PATH'} (not run offline)")


def offline_world(cluster: OfflineCluster) -> World:
    return World(
        aws_session=lambda profile, region: boto3.Session(profile_name=profile, region_name=region),
        kubernetes_clients=lambda _session: cluster.connect,
        aws_cli=reported_aws_cli,
        strict=False,
    )
