"""A job's MLflow run through MLflow's REST API (no MLflow install needed): which run it is, and
its metrics as the trainer's records. Any failure is a `TrackingUnavailable` with one line."""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from stack_outputs import StackOutputs

JOB_TAG = "trainstack.job"  # workload/trainer/mlflow_run.py sets it on every run
METRIC_KEYS = ("loss", "val_loss", "tokens_per_s", "mfu", "goodput", "step_time_s")


class TrackingUnavailable(Exception):
    """The server could not answer (down, refused, not port-forwarded)."""


@dataclass(frozen=True)
class Run:
    run_id: str
    status: str
    experiment: str
    uri: str  # the server it was found on


def tracking_uri(flag: str | None, outputs: StackOutputs) -> str | None:
    """--tracking-uri, then $MLFLOW_TRACKING_URI, then the stack's external server. A server in the
    cluster has no endpoint outside it: None (the caller says how to port-forward)."""
    if flag or os.environ.get("MLFLOW_TRACKING_URI"):
        return flag or os.environ["MLFLOW_TRACKING_URI"]
    if outputs.get("trackingUri") and not outputs.get("trackingPortForward"):
        return outputs["trackingUri"]
    return None


def _headers() -> dict[str, str]:
    if token := os.environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {token}"}
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


def _call(uri: str, path: str, timeout: float, query: dict | None = None, body: dict | None = None) -> dict:
    if uri.startswith("arn:"):  # SageMaker's managed MLflow: SigV4 through its plugin, not plain HTTP
        raise TrackingUnavailable(
            f"the stack tracks in SageMaker's managed MLflow ({uri}): open the run from SageMaker Studio, "
            "or read it with mlflow and the sagemaker-mlflow plugin"
        )
    url = f"{uri.rstrip('/')}/api/2.0/mlflow/{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, headers={"Content-Type": "application/json", **_headers()}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return {}
        raise TrackingUnavailable(f"MLflow at {uri} answered {err.code} to {path}") from err
    except (OSError, ValueError) as err:
        raise TrackingUnavailable(f"MLflow at {uri} did not answer ({err})") from err


def find_run(uri: str, experiment: str, job: str, timeout: float) -> Run | None:
    """The job's run (the newest, should a job's run id have been lost and a second one started)."""
    found = _call(uri, "experiments/get-by-name", timeout, query={"experiment_name": experiment})
    experiment_id = found.get("experiment", {}).get("experiment_id")
    if not experiment_id:
        return None
    body = {
        "experiment_ids": [experiment_id],
        "filter": f"tags.`{JOB_TAG}` = '{job}'",
        "order_by": ["attributes.start_time DESC"],
        "max_results": 1,
    }
    runs = _call(uri, "runs/search", timeout, body=body).get("runs", [])
    if not runs:
        return None
    info = runs[0]["info"]
    return Run(info["run_id"], info["status"], experiment, uri)


def records(uri: str, run_id: str, timeout: float) -> list[dict]:
    """The run's metrics as the trainer's records, one per step."""
    by_step: dict[int, dict] = {}
    for key in METRIC_KEYS:
        token = None
        while True:
            query = {"run_id": run_id, "metric_key": key, "max_results": 25000}
            if token:
                query["page_token"] = token
            page = _call(uri, "metrics/get-history", timeout, query=query)
            for m in page.get("metrics", []):
                step = int(m.get("step", 0))
                by_step.setdefault(step, {"step": step})[key] = m["value"]
            token = page.get("next_page_token")
            if not token:
                break
    return [by_step[s] for s in sorted(by_step) if "loss" in by_step[s]]
