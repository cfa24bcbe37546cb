"""`trainstack status`, `logs`, `metrics` and `doctor` on a TrainJob, against a local Kubernetes API
server: Trainer's conditions and its child Jobs' counts make its phase, JobSet's labels its pods'
roles and ranks, and doctor checks Trainer's and JobSet's CRDs and controllers."""

from __future__ import annotations

import copy
import json

import pytest
from support.fake_cluster import ADMITTED, METRICS, OUTPUTS, healthy, pod, run, trainjob, workload

from cli.analysis import phases


def trainjob_cluster(obj: dict):
    c = healthy()
    c.custom = {("trainjobs", "fsdp"): obj}
    c.workloads = [workload("fsdp", "p5", *ADMITTED, kind="TrainJob")]
    c.pods = [pod(f"fsdp-node-0-{i}-ab12c", "fsdp", "p5", index=i, jobset=True) for i in (1, 0)]
    c.logs = {"fsdp-node-0-0-ab12c": METRICS, "fsdp-node-0-1-ab12c": "rank 1 up"}
    return c


OUT = copy.deepcopy(OUTPUTS)
OUT["jobs"] = {"fsdp": {"kind": "TrainJob", "nodeGroup": "p5", "nodes": 2, "gpus": 16, "hourlyUsd": 110.08}}


@pytest.mark.parametrize(
    ("obj", "phase", "failed"),
    [
        (trainjob("fsdp", 2), "Created", False),
        (trainjob("fsdp", 2, ready=1), "Running", False),
        (trainjob("fsdp", 2, ("Suspended", "True")), "Suspended", False),
        (trainjob("fsdp", 2, ("Complete", "True")), "Complete", False),
        (trainjob("fsdp", 2, ("Failed", "True")), "Failed", True),
    ],
)
def test_status_reads_trainers_conditions_and_its_jobs(tmp_path, obj, phase, failed):
    code, out = run(trainjob_cluster(obj), tmp_path, "status", "--json", outputs=OUT)
    (job,) = json.loads(out)["jobs"]
    assert (job["kind"], job["phase"], job["failed"]) == ("TrainJob", phase, failed)
    assert (job["podsExpected"], job["podsReady"]) == (2, 2)
    assert job["queue"]["state"] == "admitted"
    assert job["metrics"]["step"] == 20
    assert code == (1 if failed else 0)


def test_logs_are_prefixed_by_the_pods_node_rank(tmp_path):
    c = trainjob_cluster(trainjob("fsdp", 2, ready=1))
    code, out = run(c, tmp_path, "logs", "fsdp", outputs=OUT)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("[node-0] metrics")  # rank 0 first, whatever the order
    assert lines[-1] == "[node-1] rank 1 up"
    _, out = run(c, tmp_path, "logs", "fsdp", "--rank", "1", outputs=OUT)
    assert out.splitlines() == ["[node-1] rank 1 up"]
    assert phases.pod_rank(c.pods[0]) == 1 and phases.pod_role(c.pods[0]) == "node-1"


def test_metrics_come_from_its_pods(tmp_path):
    code, out = run(
        trainjob_cluster(trainjob("fsdp", 2, ready=1)), tmp_path, "metrics", "fsdp", "--json", outputs=OUT
    )
    assert code == 0 and [r["step"] for r in json.loads(out)["records"]][-1] == 20


def test_doctor_checks_trainer_and_jobset(tmp_path):
    c = trainjob_cluster(trainjob("fsdp", 2, ready=1))
    _, out = run(c, tmp_path, "doctor", "--json", outputs=OUT)
    found = {f["name"]: f for f in json.loads(out)["checks"]}
    for name in (
        "CRD trainjobs.trainer.kubeflow.org",
        "CRD jobsets.jobset.x-k8s.io",
        "Kubeflow Trainer",
        "JobSet controller",
    ):
        assert found[name]["ok"], name
    c.deployments = [d for d in c.deployments if d["metadata"]["name"] != "jobset-controller"]
    c.crds = [x for x in c.crds if x["metadata"]["name"] != "jobsets.jobset.x-k8s.io"]
    code, out = run(c, tmp_path, "doctor", "--json", outputs=OUT)
    found = {f["name"]: f for f in json.loads(out)["checks"]}
    assert not found["JobSet controller"]["ok"] and found["JobSet controller"]["detail"] == "not installed"
    assert not found["CRD jobsets.jobset.x-k8s.io"]["ok"] and code == 1
