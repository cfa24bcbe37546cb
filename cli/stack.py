"""The stack `trainstack` looks at: its outputs (`pulumi stack output --json --show-secrets`, or
--outputs FILE), read as `StackOutputs`; the cluster they lead to (--kubeconfig, the user's own
kubeconfig file, or the outputs' kubeconfig), connected as a `Cluster`; the jobs the stack launches."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import cast

import yaml

from cli.errors import CliError
from cli.kube import Cluster
from conventions import TRAINING_NAMESPACE
from stack_outputs import JobSummary, StackOutputs

SHOW_OUTPUTS = "pulumi stack output --json --show-secrets > outputs.json"


def load_outputs(args: argparse.Namespace) -> StackOutputs:
    if args.kubeconfig:  # a wrong --kubeconfig is the first thing to say, before asking pulumi
        kubeconfig_file(Path(args.kubeconfig), f"--kubeconfig {args.kubeconfig}")
    if args.outputs:
        return read_outputs_file(Path(args.outputs))
    cmd = ["pulumi", "stack", "output", "--json", "--show-secrets"] + (
        ["--stack", args.stack] if args.stack else []
    )
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise CliError(
            f"the pulumi CLI is not on PATH: pass --outputs FILE, written where pulumi runs by `{SHOW_OUTPUTS}`"
        ) from None
    except subprocess.CalledProcessError as err:
        said = [line.strip() for line in err.stderr.splitlines() if line.strip()]
        first = next((line for line in said if line.lower().startswith("error")), said[0] if said else "")
        if "no stack" in first.lower() or "no stack is selected" in err.stderr.lower():
            which = f"named '{args.stack}'" if args.stack else "selected"
            raise CliError(
                f"pulumi has no stack {which} here ({first}): list them with `pulumi stack ls`, "
                "pass --stack NAME, or pass --outputs FILE"
            ) from None
        raise CliError(f"`{' '.join(cmd)}` failed: {first or f'exit {err.returncode}'}") from None
    return outputs_object(done.stdout, "`pulumi stack output`")


def read_outputs_file(path: Path) -> StackOutputs:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise CliError(
            f"cannot read the outputs file {path}: {reason}; write it with `{SHOW_OUTPUTS}`"
        ) from None
    return outputs_object(text, str(path))


def outputs_object(text: str, source: str) -> StackOutputs:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise CliError(
            f"{source} is not JSON ({err.msg} at line {err.lineno}, column {err.colno}): "
            f"write the outputs with `{SHOW_OUTPUTS}`"
        ) from None
    if not isinstance(data, dict):
        raise CliError(
            f"{source} holds a JSON {type(data).__name__}, not the stack's outputs (an object): "
            f"write them with `{SHOW_OUTPUTS}`"
        )
    return cast(StackOutputs, data)


def connect(args: argparse.Namespace, outputs: StackOutputs) -> Cluster:
    namespace = args.namespace or outputs.get("trainingNamespace") or TRAINING_NAMESPACE
    if args.kubeconfig:
        source = f"--kubeconfig {args.kubeconfig}"
        return Cluster(kubeconfig_file(Path(args.kubeconfig), source), namespace, args.timeout, source)
    if outputs.get("kubeconfigFile"):  # a stack on the user's own cluster (kind): its own file
        path = outputs["kubeconfigFile"]
        source = f"the stack's kubeconfig file {path}"
        config = with_context(kubeconfig_file(Path(path), source), outputs.get("kubeContext"), source)
        return Cluster(config, namespace, args.timeout, source)
    return Cluster(kubeconfig_from_outputs(outputs), namespace, args.timeout, "the outputs' kubeconfig")


def with_context(kubeconfig: dict, context: str | None, source: str) -> dict:
    """The kubeconfig with `context` current, as the stack's provider uses it."""
    if context is None:
        return kubeconfig
    names = [c.get("name") for c in kubeconfig.get("contexts") or []]
    if context not in names:
        raise CliError(
            f"{source} has no context {context} (it has: {', '.join(map(str, names)) or 'none'}): "
            "is the cluster still there (`kind get clusters`)?"
        )
    return {**kubeconfig, "current-context": context}


def kubeconfig_file(path: Path, source: str) -> dict:
    """The kubeconfig at `path`; `source` names it in errors as the user gave it (--kubeconfig, or
    the stack's own file), so an error never names an option that was not passed."""
    try:
        data = yaml.safe_load(path.expanduser().read_text())
    except OSError as err:
        raise CliError(f"{source}: {err.strerror or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise CliError(f"{source} is not a kubeconfig (not YAML: {str(err).splitlines()[0]})") from None
    if not isinstance(data, dict) or not data:
        raise CliError(
            f"{source} is empty or not a kubeconfig: point it at one (`aws eks update-kubeconfig`)"
        )
    return data


def kubeconfig_from_outputs(outputs: StackOutputs) -> dict:
    fix = f"write the outputs with `{SHOW_OUTPUTS}`, or pass --kubeconfig"
    kubeconfig = outputs.get("kubeconfig")
    if kubeconfig is None:
        raise CliError(f"the outputs have no kubeconfig: {fix}")
    if kubeconfig == "[secret]":
        raise CliError(f'the outputs\' kubeconfig is redacted ("[secret]"): it is a secret, so {fix}')
    if isinstance(kubeconfig, str):
        try:
            kubeconfig = yaml.safe_load(kubeconfig) if kubeconfig.strip() else None
        except yaml.YAMLError:
            raise CliError(f"the outputs' kubeconfig is neither JSON nor YAML: {fix}") from None
    if not kubeconfig:
        raise CliError(f"the outputs' kubeconfig is empty: {fix}")
    if not isinstance(kubeconfig, dict):
        raise CliError(f"the outputs' kubeconfig is a {type(kubeconfig).__name__}, not a kubeconfig: {fix}")
    return kubeconfig


def stack_jobs(outputs: StackOutputs) -> dict[str, JobSummary]:
    jobs = outputs.get("jobs") or {}
    if not isinstance(jobs, dict) or not all(isinstance(j, dict) and "kind" in j for j in jobs.values()):
        raise CliError(
            f"the outputs' `jobs` is not the stack's map of jobs: write the outputs with `{SHOW_OUTPUTS}`"
        )
    return jobs


def job_kinds(outputs: StackOutputs) -> dict[str, str]:
    return {name: job["kind"] for name, job in stack_jobs(outputs).items()}


def known_job(outputs: StackOutputs, name: str) -> JobSummary | None:
    """The job's outputs; a name the stack does not launch is a usage error (outputs without any
    jobs, as from --kubeconfig on another cluster, let any name through)."""
    jobs = stack_jobs(outputs)
    if jobs and name not in jobs:
        raise CliError(
            f"no job {name} in the stack's outputs: the stack's jobs are {', '.join(sorted(jobs))}"
        )
    return jobs.get(name)
