"""Training jobs under the mock engine, over their life: what `pulumi up` waits for, what a job
waits on before it starts, and how a job is relaunched or taken down while it trains."""

from __future__ import annotations

import json

import jsonpath_rfc9535 as jsonpath
import pytest
from support.jobs import RAYJOB, TRAINJOB, body, groups, job
from support.manifests import worker_container, worker_pod
from support.plans import plan

from components.jobs.kinds import KINDS
from components.jobs.training_job import wait_annotations

# --- waiting ---------------------------------------------------------------------------------


def wait_satisfied(expression: str, obj: dict) -> bool:
    """pulumi-kubernetes' waitFor semantics: condition=<Type>[=<Status>], jsonpath={...}[=value]."""
    if expression.startswith("condition="):
        kind, _, status = expression.removeprefix("condition=").partition("=")
        conditions = obj.get("status", {}).get("conditions", [])
        return any(c["type"] == kind and c["status"] == (status or "True") for c in conditions)
    path, sep, value = expression.removeprefix("jsonpath=").partition("}=")
    found = jsonpath.find("$" + path.strip("{}"), obj).values()
    # kubectl's jsonpath prints JSON scalars: false, not Python's False.
    text = json.dumps(found[0]) if found and isinstance(found[0], bool) else str(found[0]) if found else ""
    return bool(found) and (not sep or text == value)


def cond(**types: str) -> dict:
    return {"status": {"conditions": [{"type": t, "status": s} for t, s in types.items()]}}


SAMPLES = {
    "PyTorchJob": {
        "created": cond(Created="True"),
        "running": cond(Created="True", Running="True"),
        "succeeded": cond(Created="True", Running="False", Succeeded="True"),
        "failed": cond(Created="True", Running="False", Failed="True"),
    },
    "RayJob": {
        "created": {"status": {"jobStatus": "PENDING", "jobDeploymentStatus": "Initializing"}},
        "running": {"status": {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}},
        "succeeded": {"status": {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}},
        "failed": {"status": {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"}},
    },
    "RayCluster": {
        "created": {
            "status": {"state": "", "conditions": [{"type": "RayClusterProvisioned", "status": "False"}]}
        },
        "running": {
            "status": {"state": "ready", "conditions": [{"type": "RayClusterProvisioned", "status": "True"}]}
        },
    },
}


@pytest.mark.parametrize(
    ("kind", "wait", "ready_in"),
    [
        # A job that finished before the watch saw it running still counts as running.
        ("PyTorchJob", "running", {"running", "succeeded"}),
        ("PyTorchJob", "succeeded", {"succeeded"}),
        ("RayJob", "running", {"running", "succeeded"}),
        ("RayJob", "succeeded", {"succeeded"}),
        ("RayCluster", "running", {"running"}),
    ],
)
def test_wait_for_expressions_per_kind_and_mode(kind, wait, ready_in):
    expression = wait_annotations(kind, wait)["pulumi.com/waitFor"]
    assert {state for state, obj in SAMPLES[kind].items() if wait_satisfied(expression, obj)} == ready_in


@pytest.mark.parametrize("kind", ["PyTorchJob", "RayCluster"])
def test_wait_admitted_is_kueue_resuming_the_job(kind):
    """Kueue's webhook suspends a queued job at creation; it sets suspend false once the whole
    job is admitted (and its nodes exist, on an autoscaled group)."""
    expression = wait_annotations(kind, "admitted")["pulumi.com/waitFor"]

    def job(suspend: bool) -> dict:
        return {"spec": {"runPolicy": {"suspend": suspend}} if kind == "PyTorchJob" else {"suspend": suspend}}

    assert not wait_satisfied(expression, job(True))
    assert wait_satisfied(expression, job(False))
    assert not wait_satisfied(expression, {"spec": {}})  # not yet seen by Kueue's webhook


def test_wait_none_skips_await_and_timeouts_follow_config(kinds_plan):
    forced = {"pulumi.com/patchForce": "true"}  # an in-place update re-asserts the stack's spec over Kueue's
    assert body(job(kinds_plan, "ray-box"))["metadata"]["annotations"] == {
        "pulumi.com/skipAwait": "true",
        **forced,
    }
    assert body(job(kinds_plan, "a100"))["metadata"]["annotations"] == {
        "pulumi.com/waitFor": KINDS["PyTorchJob"].wait_for["succeeded"],
        **forced,
    }
    # p5 is autoscaled: `pulumi up` waits the autoscaler's node provisioning limit (30) on top.
    assert job(kinds_plan, "fsdp").options["customTimeouts"] == {
        "create": "90m",
        "update": "90m",
        "delete": "10m",  # the pods' grace (260 s: the group's stop) and 5 minutes, rounded up
    }
    fixed = plan("dev", operators={"clusterAutoscaler": {"enabled": False}})
    assert job(fixed, "llama-tiny").options["customTimeouts"]["create"] == "30m"


def test_a_job_is_relaunched_by_replacement_under_its_fixed_name(kinds_plan):
    for name in ("fsdp", "ray-l4", "ray-box"):
        reg = job(kinds_plan, name)
        assert reg.options["replaceOnChanges"] == ["spec"] and reg.options["deleteBeforeReplace"] is True
        assert body(reg)["metadata"]["name"] == name  # fixed: a relaunch reuses the checkpoint prefix


def test_a_config_change_changes_only_that_jobs_spec():
    jobs = [
        {"name": "a", "kind": "PyTorchJob", "nodeGroup": "gpu", "steps": 100, "wait": "none"},
        {"name": "b", "kind": "PyTorchJob", "nodeGroup": "gpu", "steps": 100, "wait": "none"},
    ]
    before = plan("dev", jobs=jobs)
    after = plan("dev", jobs=[{**jobs[0], "steps": 200}, jobs[1]])
    assert body(job(before, "a"))["spec"] != body(job(after, "a"))["spec"]
    assert body(job(before, "b")) == body(job(after, "b"))


# --- ordering ------------------------------------------------------------------------------------


def names(run, urns: list[str]) -> set[str]:
    by_urn = {r.urn: r.name for r in run.resources}
    return {by_urn[u] for u in urns if u in by_urn}


def test_jobs_wait_for_their_operator_queue_device_plugins_and_image(kinds_plan):
    fsdp = names(kinds_plan, job(kinds_plan, "fsdp").dependencies)
    assert {
        "operators-training-operator",
        "gpu-p5",
        "localqueue-p5",
        "nvidia-device-plugin",
        "aws-efa-k8s-device-plugin",
        "training-pods-fsdp-association",
    } <= fsdp
    assert "image-build" in fsdp  # the image URI comes from the build
    ray = names(kinds_plan, job(kinds_plan, "ray-l4").dependencies)
    assert {"kuberay-operator", "gpu-gpu", "localqueue-gpu", "hf-token", "ray-l4-env"} <= ray
    cpu = names(kinds_plan, job(kinds_plan, "cpu-smoke").dependencies)
    assert {"eks-system", "localqueue-system"} <= cpu and not {"gpu-p5", "gpu-gpu", "gpu-p4d"} & cpu


def test_jobs_on_a_checked_group_check_their_own_nodes_before_step_0(kinds_plan):
    """Nodes come and go with the autoscaler, so a stack-time preflight cannot see them: each job's
    default trainer checks the nodes it got (devices, NCCL over EFA, bus bandwidth) first."""
    check = [
        "--preflight-gpus-per-node",
        "8",
        "--preflight-efa-per-node",
        "32",
        "--preflight-min-bus-bandwidth",
        "200",  # half of 3200 Gbps, in GB/s
    ]
    args = worker_container(body(job(kinds_plan, "fsdp")))["args"]
    assert " ".join(check) in " ".join(args)
    for name in ("a100", "ray-l4", "cpu-smoke"):  # p4d turned it off; gpu has no EFA; CPU
        assert "--preflight-efa-per-node" not in json.dumps(body(job(kinds_plan, name))["spec"]), name
    # No separate preflight Job: the only Jobs are the driver probes (components/driver_probe.py).
    assert all(j.name.startswith("driver-") for j in kinds_plan.by_type("kubernetes:batch/v1:Job"))
    run = plan("prod", gpuNodeGroups=[{**groups()[1], "preflightMinBusBandwidthGBps": 300}])
    ray = body(job(run, "llama-1b-ray"))["spec"]["entrypoint"]
    assert "--preflight-efa-per-node 32 --preflight-min-bus-bandwidth 300" in ray


def test_the_time_to_training_chain_ends_at_a_job(prod_plan):
    from offline.timeline import critical_path, until_training

    chain = critical_path(prod_plan.resources, until_training(prod_plan.resources))
    long = [s.name for s in chain if s.minutes >= 1]
    # p5 starts empty: its nodes come with the job (in the job's own minutes), not before it.
    assert long[:2] == ["eks", "eks-system"] and "gpu-p5" not in long
    assert chain[-1].type in (TRAINJOB, RAYJOB)


# --- redeploys while a job trains -----------------------------------------------------------------


def minutes(timeout: str) -> int:
    assert timeout.endswith("m")
    return int(timeout[:-1])


def test_deleting_any_job_waits_out_its_pods_grace_period(kinds_plan, prod_plan):
    """pulumi-kubernetes deletes in the foreground, 10 minutes by default; training pods get their
    grace (sized to their group's stop, domain/stop_grace.py; Kubernetes' 30 s where none is set)
    to save and upload, and the operator tears down after that."""
    for r in (*kinds_plan.resources, *prod_plan.resources):
        if not r.custom or r.type.rsplit(":", 1)[1] not in ("PyTorchJob", "RayJob", "RayCluster"):
            continue
        grace = worker_pod(body(r)).get("terminationGracePeriodSeconds", 30)
        assert minutes(r.options["customTimeouts"]["delete"]) * 60 >= grace + 300, r.name


def test_a_changed_secret_value_relaunches_the_job_before_its_secret_goes(kinds_plan):
    """A Secret's data cannot change in place (pulumi-kubernetes replaces it, delete-first under its
    fixed name). The job must go down before it, and come back with the new values."""
    secret = kinds_plan.one("kubernetes:core/v1:Secret", "ray-l4-env")
    hf = kinds_plan.one("kubernetes:core/v1:Secret", "hf-token")
    ray_l4 = job(kinds_plan, "ray-l4")
    assert ray_l4.urn in kinds_plan.taken_down_first(secret.urn)
    assert {job(kinds_plan, n).urn for n in ("fsdp", "a100", "ray-l4", "ray-box")} <= set(
        kinds_plan.taken_down_first(hf.urn)
    )
    env = body(ray_l4)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0][
        "env"
    ]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in env if "valueFrom" in e}
    assert refs == {"HF_TOKEN": "hf-token", "WANDB_API_KEY": "ray-l4-env"}
