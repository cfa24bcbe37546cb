"""The `hyperpod` template: the reference workflow (Llama-shaped 1b on C4 on 4 x ml.g5.8xlarge, VERL
GRPO on 2 of them) on an existing HyperPod cluster by name, planned offline as a HyperPod cluster
answers. Its jobs place themselves by HyperPod's health labels, the PyTorchJob carries HyperPod's
auto-resume, and both keep checkpoints on the FSx claim."""

from __future__ import annotations

import json

import pytest
from support.cluster_objects import as_facts, hyperpod_dependencies
from support.crds import crd_errors
from support.manifests import env_of, worker_container, worker_pod
from support.paths import ROOT

from config import parse_config
from conventions import (
    HYPERPOD_AUTO_RESUME_ANNOTATION,
    HYPERPOD_DEEP_HEALTH_LABEL,
    HYPERPOD_HEALTH_LABEL,
    HYPERPOD_MAX_RETRY_ANNOTATION,
)
from offline.cost import job_cost
from offline.engine import SECRET_MASK, run_program
from offline.plan import manifest_of
from offline.scheduling import check
from offline.stack_file import read_stack_file

# What the account answers about the EKS cluster that orchestrates the HyperPod cluster.
HYPERPOD_CLUSTER = {
    "eks-cluster:sagemaker-test-cluster": {"version": "1.33", "zones": ["us-east-1a", "us-east-1b"]}
}
SCHEDULABLE = {"key": HYPERPOD_HEALTH_LABEL, "operator": "In", "values": ["Schedulable"]}
DEEP_PASSED = {"key": HYPERPOD_DEEP_HEALTH_LABEL, "operator": "In", "values": ["Passed"]}


@pytest.fixture(scope="module")
def stack():
    """The template planned as a HyperPod cluster answers: its EKS cluster, and what HyperPod runs
    before anyone deploys (the dependencies chart's objects, rendered from ../shared/charts)."""
    values, secret_keys = read_stack_file(ROOT / "Pulumi.hyperpod.yaml")
    present = hyperpod_dependencies()
    facts = {**HYPERPOD_CLUSTER, **as_facts("sagemaker-test-cluster", present)}
    run = run_program("hyperpod", values, secret_keys, facts=facts)
    return run, parse_config("hyperpod", values, frozenset(secret_keys))


def test_hyperpods_training_operator_and_device_plugin_are_reused(stack):
    run, _ = stack
    (report,) = [m for m in run.messages if m.startswith("Cluster operators")]
    lines = report.splitlines()[1:]
    assert lines[0].startswith("  reuse    trainingOperator: found Deployment kubeflow/hyperpod-dependencies")
    assert lines[3].startswith(
        "  reuse    nvidiaDevicePlugin: found DaemonSet kube-system/hyperpod-dependencies"
    )
    assert run.by_type("kubernetes:kustomize/v2:Directory") == []
    assert {r.inputs["name"] for r in run.by_type("kubernetes:helm.sh/v3:Release")} == {
        "kuberay-operator",
        "kueue",
    }


def job(run, kind: str, name: str) -> dict:
    (found,) = [manifest_of(r)[1] for r in run.resources if r.name == f"job-{name}" and r.custom]
    assert found["kind"] == kind
    return found


def test_the_template_reads_as_the_reference_workflow(stack):
    _, cfg = stack
    (g5,) = cfg.gpu_node_groups
    assert (g5.instance_type, g5.node_count, g5.instance.gpus) == ("ml.g5.8xlarge", 4, 1)
    assert cfg.existing_cluster.eks_cluster_name == "sagemaker-test-cluster"
    assert cfg.existing_cluster.checkpoint_claim == "fsx-claim"
    train, verl = cfg.jobs
    assert (train.kind, train.model, train.nodes, train.steps) == ("PyTorchJob", "1b", 4, 100)
    assert (verl.kind, verl.nodes, verl.verl.algorithm) == ("RayJob", 2, "grpo")
    # The HF token is a Pulumi secret in the file: read as one, never as plain text.
    assert cfg.hf_token == SECRET_MASK


def test_the_pytorchjob_requires_healthy_nodes_and_resumes_on_hyperpod(stack):
    run, _ = stack
    m = job(run, "PyTorchJob", "llama-1b-c4")
    assert crd_errors(m) == []
    annotations = m["metadata"]["annotations"]
    assert annotations[HYPERPOD_AUTO_RESUME_ANNOTATION] == "true"
    assert annotations[HYPERPOD_MAX_RETRY_ANNOTATION] == "3"
    worker = m["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 4 and worker["restartPolicy"] == "OnFailure"
    assert m["spec"]["runPolicy"] == {"backoffLimit": 3}
    affinity = worker_pod(m)["affinity"]["nodeAffinity"]
    required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert required == [{"matchExpressions": [SCHEDULABLE]}]
    assert affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 100, "preference": {"matchExpressions": [DEEP_PASSED]}}
    ]
    assert worker_pod(m)["nodeSelector"] == {"node.kubernetes.io/instance-type": "ml.g5.8xlarge"}
    args = worker_container(m)["args"]
    assert args[:4] == ["--model", "1b", "--steps", "100"] and args[-2:] == ["--batch-size", "2"]
    assert "--s3-checkpoints" not in args  # the claim is the checkpoints' home, not a node volume
    assert env_of(m)["HF_TOKEN"]["secretKeyRef"]["key"] == "HF_TOKEN"


def test_the_jobs_hyperpod_settings_reach_its_pytorchjob():
    """maxRetries and deepHealthCheck, set to other than their defaults (3, preferred), reach the
    manifest: the auto-resume annotation, the operator's backoffLimit, the required affinity."""
    values, secret_keys = read_stack_file(ROOT / "Pulumi.hyperpod.yaml")
    jobs = json.loads(values["trainstack:jobs"])
    jobs[0]["hyperpod"] = {"maxRetries": 9, "deepHealthCheck": "required"}
    values["trainstack:jobs"] = json.dumps(jobs)
    present = hyperpod_dependencies()
    run = run_program(
        "hyperpod",
        values,
        secret_keys,
        facts={**HYPERPOD_CLUSTER, **as_facts("sagemaker-test-cluster", present)},
    )
    m = job(run, "PyTorchJob", "llama-1b-c4")
    assert m["metadata"]["annotations"][HYPERPOD_MAX_RETRY_ANNOTATION] == "9"
    assert m["spec"]["runPolicy"] == {"backoffLimit": 9}
    affinity = worker_pod(m)["affinity"]["nodeAffinity"]
    required = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert required == [{"matchExpressions": [SCHEDULABLE, DEEP_PASSED]}]
    assert "preferredDuringSchedulingIgnoredDuringExecution" not in affinity


@pytest.mark.parametrize(("kind", "name"), [("PyTorchJob", "llama-1b-c4"), ("RayJob", "verl-grpo")])
def test_each_job_keeps_checkpoints_in_its_directory_of_the_claim(stack, kind, name):
    run, _ = stack
    pod = worker_pod(job(run, kind, name))
    (volume,) = [v for v in pod["volumes"] if v["name"] == "checkpoints"]
    assert volume == {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "fsx-claim"}}
    (mount,) = [v for v in pod["containers"][0]["volumeMounts"] if v["name"] == "checkpoints"]
    assert mount == {"name": "checkpoints", "mountPath": "/checkpoints", "subPath": f"checkpoints/{name}"}


def test_the_verl_rayjob_places_its_workers_by_health_and_has_no_auto_resume(stack):
    run, _ = stack
    m = job(run, "RayJob", "verl-grpo")
    assert crd_errors(m) == []
    # HyperPod's job-auto-restart controller watches PyTorchJobs only.
    assert HYPERPOD_AUTO_RESUME_ANNOTATION not in m["metadata"]["annotations"]
    cluster = m["spec"]["rayClusterSpec"]
    (workers,) = cluster["workerGroupSpecs"]
    assert workers["replicas"] == 2
    affinity = workers["template"]["spec"]["affinity"]["nodeAffinity"]
    assert affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [SCHEDULABLE]}
    ]
    # The head runs on the cluster's system nodes, which carry no HyperPod label.
    assert "affinity" not in cluster["headGroupSpec"]["template"]["spec"]
    assert "trainer.default_local_dir=/checkpoints/verl-grpo" in m["spec"]["entrypoint"]
    assert "trainer.nnodes=2" in m["spec"]["entrypoint"]


def test_the_scheduling_check_fits_both_jobs_on_hyperpod_labelled_nodes(stack):
    run, cfg = stack
    report = check(run, cfg)
    assert not report.never_start and not report.daemonset_problems


def test_sagemakers_nodes_cost_sagemakers_price_while_a_job_holds_them(stack):
    """ml.g5.8xlarge at SageMaker's $3.06 an hour: the jobs' cost is the owner's nodes they hold."""
    run, cfg = stack
    jobs = run.outputs["jobs"]
    assert {name: job["hourlyUsd"] for name, job in jobs.items()} == {"llama-1b-c4": 12.24, "verl-grpo": 6.12}
    assert {j.name: job_cost(cfg, j).describe() for j in cfg.jobs} == {
        "llama-1b-c4": "on the cluster owner's nodes (4 node(s), $12.24/h while it runs)",
        "verl-grpo": "on the cluster owner's nodes (2 node(s), $6.12/h while it runs)",
    }


def test_the_jobs_run_where_hyperpods_auto_resume_watches(stack):
    """Auto-resume acts on PyTorchJobs in `kubeflow` or `hyperpod*` namespaces only (AWS's HyperPod
    docs): the template's jobs, their queue and their Secrets are in `hyperpod-training`."""
    run, cfg = stack
    assert cfg.training_namespace == "hyperpod-training"
    assert job(run, "PyTorchJob", "llama-1b-c4")["metadata"]["namespace"] == "hyperpod-training"
    namespaces = {r.inputs["metadata"]["namespace"] for r in run.resources if r.type.endswith(":LocalQueue")}
    assert namespaces == {"hyperpod-training"}
    assert run.outputs["trainingNamespace"] == "hyperpod-training"


def test_a_hyperpod_pytorchjob_elsewhere_is_refused_with_the_namespace_key():
    from config.schema import ConfigError

    values, secret_keys = read_stack_file(ROOT / "Pulumi.hyperpod.yaml")
    existing = json.loads(values["trainstack:existingCluster"])
    values["trainstack:existingCluster"] = json.dumps({**existing, "namespace": "training"})
    with pytest.raises(ConfigError) as err:
        parse_config("hyperpod", values, frozenset(secret_keys))
    assert [str(p) for p in err.value.problems] == [
        "trainstack:existingCluster.namespace = \"training\": job 'llama-1b-c4' runs on HyperPod, whose "
        "auto-resume watches only kubeflow and hyperpod* namespaces; allowed: a namespace starting with "
        "hyperpod (hyperpod-training, say)"
    ]
