"""The `aws` CLI on the machine running Pulumi: the kubeconfig pulumi-eks writes runs
`aws eks get-token`, so without a recent enough CLI every Kubernetes resource fails after the
cluster is up. (The offline plan reports it instead of running it: offline/engine/world.py.)"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable

from account_checks.report import Check

# pulumi-eks's kubeconfig runs `aws eks get-token`; it refuses older CLIs (nodejs/eks/dependencies.ts).
MIN_AWS_CLI = {1: (1, 24, 0), 2: (2, 7, 0)}
AWS_CLI_NEEDS = "`aws` on PATH where Pulumi runs (the kubeconfig runs aws eks get-token), v2.7+"
AWS_CLI_INSTALL = "https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"


def installed_cli_check(which: Callable[[str], str | None], version: Callable[[str], str]) -> Check:
    """The kubeconfig pulumi-eks writes runs `aws eks get-token`: without the CLI every Kubernetes
    resource fails after the cluster is up."""
    name, needs = "aws CLI", AWS_CLI_NEEDS
    path = which("aws")
    if path is None:
        return Check(
            name,
            needs,
            "not on PATH",
            f"the aws CLI is not on this machine's PATH; the cluster's kubeconfig runs `aws eks get-token`. "
            f"Install AWS CLI v2 ({AWS_CLI_INSTALL}) and run again",
        )
    text = version(path)
    found = re.match(r"aws-cli/(\d+)\.(\d+)\.(\d+)", text)
    if found is None:
        return Check(
            name,
            needs,
            f"{path}: `aws --version` said {text!r}",
            f"{path} does not answer `aws --version` as the AWS CLI; install AWS CLI v2 ({AWS_CLI_INSTALL})",
        )
    got = tuple(int(n) for n in found.groups())
    least = MIN_AWS_CLI.get(got[0], MIN_AWS_CLI[2])
    problem = None
    if got < least:
        problem = (
            f"the aws CLI at {path} is {'.'.join(map(str, got))}; `aws eks get-token` needs "
            f"{'.'.join(map(str, least))} or later. Install AWS CLI v2 ({AWS_CLI_INSTALL})"
        )
    return Check(name, needs, f"{path} {'.'.join(map(str, got))}", problem)


def cli_version(path: str) -> str:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    return (done.stdout or done.stderr).strip()
