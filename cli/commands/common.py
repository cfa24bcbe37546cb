"""What several commands fetch: a job's metrics records from its pods' logs, and its MLflow run."""

from __future__ import annotations

import argparse

from cli import mlflow_api
from cli.analysis import phases
from cli.kube import Cluster
from stack_outputs import StackOutputs


def metric_records(cluster: Cluster, pods: list[dict], tail: int | None = None) -> list[dict]:
    """The trainer's metrics records in the pods' logs, one per step (merged), by step."""
    records: dict[int, dict] = {}
    for pod in pods:
        for r in phases.parse_metrics(cluster.log(pod["metadata"]["name"], tail=tail)):
            records[r["step"]] = {**records.get(r["step"], {}), **r}
    return [records[s] for s in sorted(records)]


def job_experiment(outputs: StackOutputs, job: str) -> str:
    """A job's own experiment on the stack's server (one user per job), else the stack's."""
    summary = (outputs.get("jobs") or {}).get(job) or {}
    return summary.get("experiment") or outputs.get("trackingExperiment", "")


def job_run(args: argparse.Namespace, outputs: StackOutputs, job: str) -> mlflow_api.Run | str | None:
    """The job's MLflow run; a line saying why it cannot be read; None without tracking."""
    if not outputs.get("trackingUri"):
        return None
    uri = mlflow_api.tracking_uri(args.tracking_uri, outputs)
    if uri is None:
        return f"run `{outputs['trackingPortForward']}`, then pass --tracking-uri http://localhost:5000"
    try:
        return mlflow_api.find_run(uri, job_experiment(outputs, job), job, args.timeout) or "no run yet"
    except mlflow_api.TrackingUnavailable as err:
        return str(err)
