"""What becomes of a TrainJob whose pods exit, decided by the real programs instead of the node drills'
model of them (support/node_drill.py jobset_action): the JobSet Trainer builds from the stack's
ClusterTrainingRuntime (components/jobs/training_runtime.py, runtime_spec and job_set_spec), sent to
the API server, its Job run by the real Job controller (kube-controller-manager) and the gang by the
real JobSet controller, each pod ended by kwok with the exit code the case chooses
(support/cluster/pod-exit-code.yaml).

The trainer's permanent exit fails the Job at once through its pod failure policy (reason
PodFailurePolicy: kubernetes v1.36.3 pkg/controller/job/pod_failure_policy.go, matchPodFailurePolicy)
and the JobSet through the runtime's rule, with no restart (jobset v0.12.0
pkg/controllers/failure_policy.go, executeFailurePolicy and failJobSetActionApplier); any other exit
fails the Job past its backoffLimit of 0 and JobSet's default action recreates the whole gang
(restartJobSetActionApplier), whose next run completes; exit 0 on every pod completes the JobSet."""

from __future__ import annotations

import itertools

import pytest
from support.cluster.harness import CLUSTER_GROUP
from support.cluster.stacks import PREBUILT_IMAGE
from support.node_drill import jobset_action
from trainer.resilience import CONFIG_EXIT_CODE

from components.jobs.pods import Checkpoints
from components.jobs.training_runtime import PERMANENT_EXIT_CODES, RuntimeArgs, job_set_spec, runtime_spec
from domain.placement import system_placement
from offline.nodes import Node

pytestmark = CLUSTER_GROUP

# The gang's nodes, which no other test's pods select (and the runtime's pods select only them).
POOL = {"trainstack.test/pool": "failure-policy"}
NODES = Node(
    group="failure-policy",
    instance_type=None,
    max_nodes=2,
    labels=POOL,
    taints=[],
    allocatable={"cpu": 4000, "memory": 16},
)
RUNTIME = runtime_spec(
    RuntimeArgs(system_placement("m6i.large", 2, 8, None, POOL), Checkpoints(), None, None, None)
)
GANG = 2  # the TrainJob's numNodes: one Job of two pods
NAME = "gang"
EXIT_CODE = "trainstack.test/exit-code"  # read by the kwok stage; only a gang's first run (its docstring)
API_VERSION = "jobset.x-k8s.io/v1alpha2"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


@pytest.fixture(scope="module")
def nodes(cluster, operators):
    names = cluster.add_nodes(NODES)
    yield names
    cluster.remove_nodes(names)


class Gang:
    """The runtime's JobSet in a namespace of its own, its pods to exit with one code."""

    def __init__(self, cluster, namespace: str):
        self.cluster = cluster
        self.namespace = namespace

    def run(self, code: int) -> dict:
        """Sends the JobSet; answers it once it has ended (Completed or Failed)."""
        cluster, namespace = self.cluster, self.namespace
        # Pods are refused until the namespace's ServiceAccount exists, and the Job controller backs
        # off from a refused pod.
        cluster.wait(
            "default ServiceAccount",
            lambda: bool(
                cluster.core.list_namespaced_service_account(
                    namespace, field_selector="metadata.name=default"
                ).items
            ),
        )
        train_job = {
            "metadata": {"name": NAME},
            "spec": {"trainer": {"numNodes": GANG, "image": PREBUILT_IMAGE}},
        }
        spec = job_set_spec(train_job, {"spec": RUNTIME})
        (replicated,) = spec["replicatedJobs"]
        replicated["template"]["spec"]["template"]["metadata"] = {"annotations": {EXIT_CODE: str(code)}}
        cluster.objects.apply(
            {
                "apiVersion": API_VERSION,
                "kind": "JobSet",
                "metadata": {"name": NAME, "namespace": namespace},
                "spec": spec,
            }
        )
        found: dict = {}

        def ended() -> bool:
            found["jobset"] = cluster.objects.get(API_VERSION, "JobSet", NAME, namespace)
            return bool(condition(found["jobset"], "Completed") or condition(found["jobset"], "Failed"))

        cluster.wait(f"JobSet {namespace}/{NAME} ended", ended, 120)
        return found["jobset"]

    def job(self) -> dict:
        (job,) = self.cluster.objects.list("batch/v1", "Job", self.namespace)
        return job

    def pods(self) -> list:
        return self.cluster.core.list_namespaced_pod(
            self.namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={NAME}"
        ).items


CASES = itertools.count()


@pytest.fixture
def gang(cluster, nodes):
    """Removed before the nodes, so kwok ends its pods."""
    namespace = f"failure-policy-{next(CASES)}"
    cluster.core.create_namespace({"metadata": {"name": namespace}})
    yield Gang(cluster, namespace)
    cluster.delete_namespace(namespace)


def model(code: int) -> str:
    """What the CPU drills' model (support/node_drill.py jobset_action) says of the gang's pods all
    exiting with `code`: held to what the real controllers did, case by case."""
    return jobset_action(RUNTIME, {f"node-{i}": code for i in range(GANG)})


def condition(jobset: dict, kind: str) -> dict | None:
    """The JobSet's condition of type `kind`, when True."""
    conditions = (jobset.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)


def test_a_permanent_exit_fails_the_jobset_without_a_restart(gang):
    assert CONFIG_EXIT_CODE in PERMANENT_EXIT_CODES
    jobset = gang.run(CONFIG_EXIT_CODE)
    failed = condition(jobset, "Failed")
    assert failed is not None, jobset.get("status")
    assert failed["reason"] == "FailJobSetFailurePolicyAction", failed
    assert jobset["status"]["restarts"] == 0
    (job_failed,) = [c for c in gang.job()["status"]["conditions"] if c["type"] == "Failed"]
    assert job_failed["reason"] == "PodFailurePolicy", job_failed
    assert {p.metadata.labels[RESTART_ATTEMPT] for p in gang.pods()} == {"0"}
    assert model(CONFIG_EXIT_CODE) == "job set failed"


@pytest.mark.parametrize("code", [1, 137])
def test_any_other_exit_restarts_the_whole_gang_which_then_completes(gang, code):
    """1: a survivor of a lost node (torchrun's ChildFailedError); 137: a container killed (OOM)."""
    assert code not in PERMANENT_EXIT_CODES
    jobset = gang.run(code)
    assert condition(jobset, "Completed") is not None, jobset.get("status")
    assert jobset["status"]["restarts"] == 1
    assert gang.job()["metadata"]["labels"][RESTART_ATTEMPT] == "1"
    # The first run's pods went with their Job (JobSet deletes it in the foreground before it
    # recreates it); the second run is the whole gang again.
    pods = gang.pods()
    assert len(pods) == GANG, pods
    assert {(p.metadata.labels[RESTART_ATTEMPT], p.status.phase) for p in pods} == {("1", "Succeeded")}
    assert model(code) == "gang restarted"


def test_exit_0_on_every_pod_completes_the_jobset(gang):
    jobset = gang.run(0)
    assert condition(jobset, "Completed") is not None, jobset.get("status")
    assert jobset["status"]["restarts"] == 0
    pods = gang.pods()
    assert len(pods) == GANG, pods
    assert {(p.metadata.labels[RESTART_ATTEMPT], p.status.phase) for p in pods} == {("0", "Succeeded")}
    assert model(0) == "job set completed"
