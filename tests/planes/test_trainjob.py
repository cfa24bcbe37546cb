"""TrainJob (Kubeflow Trainer v2) under the mock engine: the stack's runtime per node group and each
job's own fields and patches, valid against the upstream CRDs; the pods Trainer builds from the two
are a PyTorchJob's pods; Kueue's PodSets, the scheduling check, the restart rules and the outputs."""

from __future__ import annotations

import json

import jsonpath_rfc9535 as jsonpath
import pytest
from support.crds import crd_errors
from support.jobs import body, job
from support.manifests import worker_pod
from support.plans import plan

from components.jobs.kinds import KINDS
from components.jobs.training_runtime import (
    MAX_RESTARTS,
    PERMANENT_EXIT_CODES,
    PERMANENT_RULE,
    job_set_spec,
)
from components.jobs.trainjob import JOBSET_NAME_LABEL, PATCH_MANAGER
from conventions import JOB_LABEL
from offline.scheduling import check, referenced_objects

RUNTIME = "kubernetes:trainer.kubeflow.org/v1alpha1:ClusterTrainingRuntime"
GROUPS = [
    {"name": "gpu", "instanceType": "g6.xlarge"},
    {"name": "p5", "instanceType": "p5.48xlarge", "nodeCount": 2, "efa": True},
]
JOBS = [
    {"name": "twin-pt", "kind": "PyTorchJob", "nodeGroup": "gpu", "steps": 50, "wait": "none"},
    {"name": "twin-tj", "kind": "TrainJob", "nodeGroup": "gpu", "steps": 50, "wait": "none"},
    {"name": "fsdp", "kind": "TrainJob", "nodeGroup": "p5", "nodes": 2, "model": "1b", "maxRecreations": 4},
    {
        "name": "own",
        "kind": "TrainJob",
        "nodeGroup": "gpu",
        "command": ["python", "-m", "trainer.train"],
        "wait": "none",
    },
    {"name": "cpu", "kind": "TrainJob", "nodeGroup": "system", "nodes": 2, "steps": 20},
]


@pytest.fixture(scope="module")
def tj_plan():
    return plan("dev", gpuNodeGroups=GROUPS, jobs=JOBS)


def runtimes(run) -> dict[str, dict]:
    return {m["metadata"]["name"]: m for m in (body(r) for r in run.by_type(RUNTIME))}


def test_the_runtimes_the_jobs_and_the_jobsets_trainer_builds_are_valid_custom_resources(tj_plan):
    found = runtimes(tj_plan)
    assert set(found) == {"trainstack-gpu", "trainstack-p5", "trainstack-system"}  # one per group used
    for m in found.values():
        assert crd_errors(m) == [], m["metadata"]["name"]
    for name in ("twin-tj", "fsdp", "own", "cpu"):
        m = body(job(tj_plan, name))
        assert crd_errors(m) == [], name
        runtime = found[m["spec"]["runtimeRef"]["name"]]
        jobset = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name},
            "spec": job_set_spec(m, runtime),
        }
        assert crd_errors(jobset) == [], name


def test_a_trainjobs_pods_are_a_pytorchjobs_apart_from_the_torch_plugins_env(tj_plan):
    """The runtime holds the group's part and the job its own; merged as Trainer merges them
    (strategic merge of the runtime patch, then the trainer's fields), a TrainJob's pod is the
    PyTorchJob's pod of the same job: same volumes, mounts, resources, placement, grace period and
    environment in the same order, plus the torch plugin's PET_* and port."""
    objects = referenced_objects(tj_plan)
    pytorch = json.loads(json.dumps(worker_pod(body(job(tj_plan, "twin-pt")))).replace("twin-pt", "twin-tj"))
    train = worker_pod(body(job(tj_plan, "twin-tj")), objects)
    (pc,), (tc,) = pytorch.pop("containers"), train.pop("containers")
    assert train.pop("restartPolicy") == "Never"  # what ExitCode gives a PyTorchJob's pods too
    assert train == pytorch
    assert (pc.pop("name"), tc.pop("name")) == ("pytorch", "node")
    assert tc.pop("ports") == [{"containerPort": 29500}]
    pet = [e for e in tc["env"] if e["name"].startswith("PET_")]
    assert [e["name"] for e in pet] == [
        "PET_NNODES",
        "PET_NPROC_PER_NODE",
        "PET_NODE_RANK",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
    ]
    assert pet[3]["value"] == "twin-tj-node-0-0.twin-tj"  # JobSet's headless service
    run_ids = [e for c in (pc, tc) for e in c["env"] if e["name"] == "TRAINSTACK_RUN"]
    assert len(run_ids) == 2  # the run id hashes the flags, which name the job: not compared
    strip = {"TRAINSTACK_RUN", *(e["name"] for e in pet)}
    pc["env"] = [e for e in pc["env"] if e["name"] not in strip]
    tc["env"] = [e for e in tc["env"] if e["name"] not in strip]
    assert tc == pc


def test_each_job_names_its_groups_runtime_and_patches_in_only_its_own_part(tj_plan):
    m = body(job(tj_plan, "fsdp"))
    assert m["spec"]["runtimeRef"] == {
        "name": "trainstack-p5",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    trainer = m["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 8)
    assert trainer["command"] == ["python", "-m", "trainer.launch", "-m", "trainer.train"]
    (patch,) = m["spec"]["runtimePatches"]
    assert patch["manager"] == PATCH_MANAGER != "kueue.x-k8s.io/manager"  # Kueue adds its own
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = rjob["template"]["spec"]["template"]
    assert pod["metadata"]["labels"][JOB_LABEL] == "fsdp"
    # p5: EKS labels its network place, and an EFA group's gang is kept close by default.
    assert pod["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-preferred-topology": "topology.k8s.aws/network-node-layer-3"
    }
    assert pod["spec"] == {"serviceAccountName": "job-fsdp"}
    # The group's environment is the runtime's; the job's own (its run's bound) the trainer's.
    env = {e["name"]: e for e in trainer["env"]}
    assert env["TRAINSTACK_MAX_RECREATIONS"]["value"] == "4" and "FI_PROVIDER" not in env
    runtime = runtimes(tj_plan)["trainstack-p5"]
    (container,) = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "spec"
    ]["containers"]
    assert {"FI_PROVIDER", "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"} <= {e["name"] for e in container["env"]}
    assert "image" not in container  # each job names its own


def test_one_runtime_per_group_made_once_after_trainer_and_waited_for(tj_plan):
    regs = {r.name: r for r in tj_plan.resources if r.type == RUNTIME}
    by_urn = {r.urn: r.name for r in tj_plan.resources}
    assert set(regs) == {"runtime-gpu", "runtime-p5", "runtime-system"}
    assert "kubeflow-trainer" in {by_urn.get(u) for u in regs["runtime-gpu"].dependencies}  # its CRDs
    for name, runtime in (("twin-tj", "runtime-gpu"), ("own", "runtime-gpu"), ("cpu", "runtime-system")):
        deps = {by_urn.get(u) for u in job(tj_plan, name).dependencies}
        assert runtime in deps or f"trainstack:jobs:TrainingRuntime::{runtime}" in {
            u.rsplit("$", 1)[-1] for u in job(tj_plan, name).dependencies
        }, (name, deps)


def test_the_restart_rules_fail_at_once_on_permanent_exits_and_restart_the_gang_otherwise(tj_plan):
    spec = runtimes(tj_plan)["trainstack-p5"]["spec"]
    assert spec["mlPolicy"] == {"numNodes": 1, "torch": {}}
    jobset = spec["template"]["spec"]
    assert jobset["failurePolicy"] == {
        "maxRestarts": MAX_RESTARTS,
        "rules": [
            {"name": PERMANENT_RULE, "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}
        ],
    }
    (rjob,) = jobset["replicatedJobs"]
    # Trainer's runtime webhook: the trainer's replicated Job has one replica and a `node` container
    # (pkg/webhooks/trainingruntime_webhook.go, validateReplicatedJobs); the node count is the Job's.
    assert rjob["replicas"] == 1 and rjob["name"] == "node"
    assert rjob["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
    }
    j = rjob["template"]["spec"]
    assert (j["backoffLimit"], j["completionMode"], j["template"]["spec"]["restartPolicy"]) == (
        0,
        "Indexed",
        "Never",
    )
    assert j["podFailurePolicy"]["rules"] == [
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "node", "operator": "In", "values": list(PERMANENT_EXIT_CODES)},
        }
    ]


def test_kueues_pod_sets_and_the_scheduling_check(tj_plan):
    objects = referenced_objects(tj_plan)
    ((name, template, count),) = KINDS["TrainJob"].pod_sets(body(job(tj_plan, "fsdp")), objects)
    assert (name, count) == ("node", 2)
    assert template["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"
    with pytest.raises(ValueError, match="its ClusterTrainingRuntime trainstack-p5 is not among the stack's"):
        KINDS["TrainJob"].pod_sets(body(job(tj_plan, "fsdp")))
    chains = {c.job: c for c in check(tj_plan).chains}
    assert (
        chains["fsdp"].fits and chains["fsdp"].links[0] == "admission: trainstack-p5 (node on trainstack-p5)"
    )
    assert (
        chains["fsdp"].links[-1].startswith("topology: pod set node: prefers one network-node-layer-3 domain")
    )
    assert chains["cpu"].fits and chains["cpu"].links[1].startswith("nodes: system")


def test_the_outputs_say_how_it_stops_and_how_to_watch_it(tj_plan):
    jobs = tj_plan.outputs["jobs"]
    assert jobs["fsdp"]["kind"] == "TrainJob" and jobs["fsdp"]["gpus"] == 16
    assert jobs["fsdp"]["retries"].startswith(
        "fails once its pods have been recreated 4 time(s) without a newer checkpoint"
    )
    assert (
        f"at most {MAX_RESTARTS} times" in jobs["own"]["retries"]
        and "maxRecreations" not in jobs["own"]["retries"]
    )
    assert jobs["fsdp"]["watch"] == "kubectl -n training get trainjob fsdp -w"
    assert jobs["fsdp"]["logs"] == f"kubectl -n training logs -f --prefix -l {JOBSET_NAME_LABEL}=fsdp"


def wait_satisfied(expression: str, obj: dict) -> bool:
    if expression.startswith("condition="):
        kind = expression.removeprefix("condition=")
        return any(c["type"] == kind and c["status"] == "True" for c in obj["status"].get("conditions", []))
    path, sep, value = expression.removeprefix("jsonpath=").partition("}=")
    found = jsonpath.find("$" + path.strip("{}"), obj).values()
    text = json.dumps(found[0]) if found and isinstance(found[0], bool) else str(found[0]) if found else ""
    return bool(found) and (not sep or text == value)


def trainjob_status(ready: int, succeeded: int, **conditions: str) -> dict:
    jobs = [
        {"name": "node", "ready": ready, "succeeded": succeeded, "failed": 0, "active": 1, "suspended": 0}
    ]
    return {
        "spec": {"suspend": False},
        "status": {
            "jobsStatus": jobs,
            "conditions": [{"type": t, "status": s} for t, s in conditions.items()],
        },
    }


def test_what_pulumi_up_waits_for():
    wait = KINDS["TrainJob"].wait_for
    pending, running = trainjob_status(0, 0), trainjob_status(1, 0)
    done = trainjob_status(0, 1, Complete="True")
    assert [wait_satisfied(wait["running"], s) for s in (pending, running, done)] == [False, True, True]
    assert [wait_satisfied(wait["succeeded"], s) for s in (pending, running, done)] == [False, False, True]
    assert wait_satisfied(wait["admitted"], running)
    assert not wait_satisfied(wait["admitted"], {"spec": {"suspend": True}})
