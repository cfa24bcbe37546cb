"""Kubeflow Trainer v2 in the operators plane: the 2.3.0 chart with JobSet 0.12.0 as Helm renders it
from ../shared/charts, its controllers on the system nodes running the released images; a cluster
that runs JobSet already keeps it; Kueue's integrations follow the operators the stack runs."""

from __future__ import annotations

import yaml
from support.charts import render
from support.cluster_objects import as_facts, charts, installed, keys
from support.plans import EXISTING_CLUSTER, WITH_TRAINJOB, plan

from components.operators import JOBSET_IMAGE
from conventions import SYSTEM_NODE_LABEL

RELEASE = "kubernetes:helm.sh/v3:Release"


def release(run, name: str):
    (found,) = [r for r in run.by_type(RELEASE) if r.inputs["name"] == name]
    return found


def deployments(objects: list[dict]) -> dict[str, dict]:
    """Pod spec of each Deployment, by its container's image."""
    found = {}
    for o in objects:
        if o["kind"] == "Deployment":
            spec = o["spec"]["template"]["spec"]
            found[spec["containers"][0]["image"]] = spec
    return found


def frameworks(run) -> list[str]:
    values = release(run, "kueue").inputs["values"]
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    return config["integrations"]["frameworks"]


def test_trainer_and_jobset_run_on_system_nodes_with_the_released_images(prod_plan):
    """The JobSet subchart as git holds it names a staging image at `main`: the stack's values name
    the one the published chart does."""
    objects = render(prod_plan, "kubeflow-trainer")
    found = deployments(objects)
    jobset = f"{JOBSET_IMAGE['repository']}:{JOBSET_IMAGE['tag']}"
    assert set(found) == {"ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0", jobset}
    for spec in found.values():
        assert spec["nodeSelector"] == SYSTEM_NODE_LABEL
    assert found[jobset]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    crds = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert {
        "trainjobs.trainer.kubeflow.org",
        "clustertrainingruntimes.trainer.kubeflow.org",
        "jobsets.jobset.x-k8s.io",
    } <= crds
    # No runtimes of the chart's: no installer Job, no ClusterTrainingRuntime.
    assert not [o for o in objects if o["kind"] in ("Job", "ClusterTrainingRuntime")]
    # Kueue starts once Trainer's CRDs and webhooks serve: it sets up the TrainJob integration then.
    kueue = release(prod_plan, "kueue")
    assert release(prod_plan, "kubeflow-trainer").urn in kueue.dependencies


def test_kueue_manages_trainjob_beside_pytorchjob(prod_plan):
    assert frameworks(prod_plan) == [
        "batch/job",
        "kubeflow.org/pytorchjob",
        "ray.io/rayjob",
        "ray.io/raycluster",
        "trainer.kubeflow.org/trainjob",
    ]
    # Without Trainer a stack runs its training as PyTorchJobs (a TrainJob would be refused).
    pytorchjob = {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "p5", "nodes": 2}
    no_trainer = plan("prod", operators={"trainer": {"enabled": False}}, jobs=[pytorchjob])
    assert not [r for r in no_trainer.by_type(RELEASE) if r.inputs["name"] == "kubeflow-trainer"]


def test_a_cluster_that_runs_jobset_keeps_it_and_trainer_comes_without_its_own():
    there = installed(
        charts() / "kubeflow-trainer-2.3.0" / "charts" / "jobset",
        "jobset",
        "jobset-system",
        {"image": dict(JOBSET_IMAGE)},
    )
    run = plan("existing", jobs=WITH_TRAINJOB, facts={**EXISTING_CLUSTER, **as_facts("jobset", there)})
    lines = next(m for m in run.messages if m.startswith("Cluster operators")).splitlines()
    (jobset,) = [x for x in lines if " jobset: " in x]
    assert jobset.startswith("  reuse    jobset: found Deployment jobset-system/")
    (trainer,) = [x for x in lines if " trainer: " in x]
    assert trainer.startswith("  install  trainer: found nothing")
    assert release(run, "kubeflow-trainer").inputs["values"]["jobset"]["install"] is False
    ours = render(run, "kubeflow-trainer")
    assert keys(ours) & keys(there) == set()
