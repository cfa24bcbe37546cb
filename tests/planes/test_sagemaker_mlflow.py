"""SageMaker's managed MLflow as the stack's tracking (`tracking.uri` an mlflow-tracking-server ARN): the jobs get the ARN as their tracking URI, each job's role may use that resource's
MLflow API and nothing more, and the image's sagemaker-mlflow plugin is what MLflow resolves the ARN
with (its `arn` tracking store and SigV4 auth for the service `sagemaker-mlflow`). No credentials
go with it; `trainstack metrics` says where the run is instead of calling a URL it cannot sign for."""

from __future__ import annotations

import json

import pytest
from support.config_rules import problems
from support.jobs import body, job
from support.plans import plan

from cli import mlflow_api

ARN = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/team"
TRACKING = {"mode": "external", "uri": ARN, "experiment": "llama"}


@pytest.fixture(scope="module")
def tracked():
    return plan("dev", tracking=TRACKING)


def test_the_job_tracks_to_the_arn_and_its_role_may_use_that_resource_only(tracked):
    env = {e["name"]: e.get("value") for e in body(job(tracked, "llama-tiny"))["spec"]["trainer"]["env"]}
    assert env["MLFLOW_TRACKING_URI"] == ARN
    policy = json.loads(
        tracked.one("aws:iam/rolePolicy:RolePolicy", "training-pods-llama-tiny-policy").inputs["policy"]
    )
    (mlflow,) = [s for s in policy["Statement"] if s["Sid"] == "TrackInSageMakerMlflow"]
    assert mlflow == {
        "Sid": "TrackInSageMakerMlflow",
        "Effect": "Allow",
        "Action": ["sagemaker-mlflow:*"],
        "Resource": ARN,
    }
    untracked = plan("dev")
    policy = json.loads(
        untracked.one("aws:iam/rolePolicy:RolePolicy", "training-pods-llama-tiny-policy").inputs["policy"]
    )
    assert not [s for s in policy["Statement"] if "sagemaker-mlflow:*" in s["Action"]]


def test_credentials_with_an_arn_are_refused_naming_the_key():
    (msg,) = problems(tracking={**TRACKING, "username": "alice"})
    assert msg.startswith(
        f"trainstack:tracking.uri = \"{ARN}\": SageMaker's MLflow signs each call with the pod's AWS identity, "
        "not tracking.username"
    ), msg
    app = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-app/x"  # signs for `sagemaker`: not given
    (msg,) = problems(tracking={**TRACKING, "uri": app})
    assert "mode external needs the server's URI" in msg and "a SageMaker MLflow ARN" in msg


def test_an_arn_needs_the_pods_aws_identity_and_the_training_images_plugin():
    verl = {"name": "grpo", "kind": "RayJob", "nodeGroup": "gpu", "nodes": 1, "wait": "none",
            "verl": {"algorithm": "grpo", "model": "Qwen/Qwen2.5-0.5B-Instruct"}}  # fmt: skip
    found = problems(
        tracking=TRACKING, gpuNodeGroups=[{"name": "gpu", "instanceType": "g6e.xlarge"}], jobs=[verl]
    )
    assert any(
        m.startswith('trainstack:jobs[0].verl = "grpo": the VERL image has no sagemaker-mlflow plugin')
        for m in found
    ), found
    found = problems(tracking=TRACKING, existingCluster={"kubeconfig": "kind.yaml"})
    assert any(
        m.startswith(f'trainstack:tracking.uri = "{ARN}": a kubeconfig stack\'s pods have no AWS identity')
        for m in found
    ), found


def test_mlflow_resolves_the_arn_with_the_images_plugin(monkeypatch):
    """The image's lock holds sagemaker-mlflow (tests/workload/test_image_pins.py); as installed
    here, MLflow's store for the ARN is the plugin's, at the region's SageMaker MLflow host, and its
    requests are signed for the service the role's statement names. The pods' MLFLOW_TRACKING_URI
    is what the plugin's auth reads."""
    from mlflow.tracking._tracking_service.utils import _get_store
    from mlflow.tracking.request_auth.registry import fetch_auth

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", ARN)
    store = _get_store(ARN)
    assert type(store).__name__ == "MlflowSageMakerStore"
    creds = store.get_host_creds()
    assert creds.host == "https://us-east-1.experiments.sagemaker.aws"
    auth = fetch_auth(creds.auth)
    assert (auth.sigv4._service_name, auth.region) == ("sagemaker-mlflow", "us-east-1")


def test_trainstack_metrics_says_where_the_run_is():
    with pytest.raises(mlflow_api.TrackingUnavailable) as err:
        mlflow_api.find_run(ARN, "llama", "llama-tiny", 5)
    assert str(err.value).startswith(f"the stack tracks in SageMaker's managed MLflow ({ARN})")
