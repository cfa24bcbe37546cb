"""An upgrade on the tier: the `local` template brought up by the previous release's program (the
commit before the shared-cluster work, support/cluster/previous_release.py), its TrainJob and RayJob
admitted and their pods bound, then brought up by this checkout's program on the same state, as a
user who pulls and runs `pulumi up` does. The real engine and provider run both.

What the upgrade must keep: no manual step (the `up` succeeds as it is), nothing of the user's or the
operators' deleted or taken over (the takeover detector around each operation, holding what was on
the cluster before the previous release's first `up`), no job relaunched (the jobs' uids), and the
queues, flavors and runtime under the names the running jobs use: the earlier stack's ClusterQueue
is found, so the stack keeps the earlier names rather than renaming them per stack (which would
replace every job). The preview before the `up` says so: nothing replaced, nothing deleted."""

from __future__ import annotations

import time

import pytest
from support.cluster.engine import Engine
from support.cluster.harness import CLUSTER_GROUP
from support.cluster.objects import admitted_jobs
from support.cluster.previous_release import previous_source
from support.cluster.stacks import on_cluster, planned, template_config

from conventions import STACK_LABEL, SYSTEM_GROUP

pytestmark = CLUSTER_GROUP

STACK = "upgrade"
NAMESPACE = "upgrade-training"
POOL = {"trainstack.test/pool": STACK}
JOB_KINDS = (
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    ("ray.io/v1", "RayJob"),
)
# Seconds the jobs are watched after the upgrade's `up`: none evicted, no pod recreated.
OBSERVED_POLLS = 10
# What a `preview` may count without replacing or deleting anything.
KEEPING = {"same", "update", "create"}


class UpgradedStack:
    def __init__(self, cluster, directory, source):
        config = template_config("local")
        for job in config["trainstack:jobs"]:
            job["wait"] = "none"  # admitted and bound below, by the cluster
        existing = config["trainstack:existingCluster"]
        existing["namespace"] = NAMESPACE
        existing["systemNodes"]["count"] = 3  # both jobs admitted at once
        existing["systemNodes"]["nodeSelector"] |= POOL
        self.config = on_cluster(config, cluster.kubeconfig, "trainstack-test")
        self.plan = planned(STACK, self.config)
        self.config["trainstack:operators"] = {"trainingOperator": {"mode": "reuse"}}
        self.cluster = cluster
        self.previous = Engine(directory, cluster.bin_dir, STACK, cluster.objects, source=source)
        self.previous.configure(self.config)
        self.current = Engine(directory, cluster.bin_dir, STACK, cluster.objects)
        # One stack: what was on the cluster before its first operation (the previous release's) is
        # what every later one must leave alone.
        self.current.detector = self.previous.detector

    def jobs(self) -> dict[str, dict]:
        return {
            o["metadata"]["name"]: o
            for api_version, kind in JOB_KINDS
            for o in self.cluster.objects.list(api_version, kind, NAMESPACE)
        }

    def trainjobs(self) -> list[str]:
        return [j["name"] for j in self.config["trainstack:jobs"] if j["kind"] == "TrainJob"]

    def bound_pods(self) -> dict[str, str]:
        """The TrainJob's pods on a node, by name: their uids. Not the RayJob's: no Ray runs under kwok,
        so each of its attempts fails and KubeRay starts the next on a new Ray cluster, upgrade or not."""
        trainjobs = self.trainjobs()
        pods = self.cluster.core.list_namespaced_pod(NAMESPACE).items
        return {
            p.metadata.name: p.metadata.uid
            for p in pods
            if p.spec.node_name
            and not p.metadata.deletion_timestamp
            and any(p.metadata.name.startswith(f"{j}-") for j in trainjobs)
        }

    def cluster_queues(self) -> set[str]:
        return {
            q["metadata"]["name"] for q in self.cluster.objects.list("kueue.x-k8s.io/v1beta2", "ClusterQueue")
        }


@pytest.fixture(scope="module")
def upgraded(cluster, tmp_path_factory):
    source = previous_source(tmp_path_factory.mktemp("previous-release"))
    stack = UpgradedStack(cluster, tmp_path_factory.mktemp("upgrade-stack"), source)
    system = next(n for n in stack.plan.nodes if n.group == SYSTEM_GROUP)
    nodes = cluster.add_nodes(system)
    cluster.operators.start_all(stack.plan.cfg.existing_cluster.system_nodes.node_selector)
    cluster.settle()
    yield stack
    cluster.remove_nodes(nodes)


def test_the_previous_release_brings_its_jobs_up(upgraded):
    outcome = upgraded.previous("up")
    assert outcome.returncode == 0, str(outcome)
    jobs = upgraded.jobs()
    assert set(jobs) == {j["name"] for j in upgraded.config["trainstack:jobs"]}
    upgraded.cluster.wait(
        "both jobs admitted", lambda: admitted_jobs(upgraded.cluster.objects, NAMESPACE) == set(jobs), 120
    )
    upgraded.cluster.wait("the TrainJob's pods bound", lambda: bool(upgraded.bound_pods()), 120)
    upgraded.uids = {name: job["metadata"]["uid"] for name, job in jobs.items()}
    upgraded.pods = upgraded.bound_pods()
    upgraded.queues = upgraded.cluster_queues()
    assert "trainstack-system" in upgraded.queues  # the earlier, cluster-wide name


def test_the_plan_of_the_upgrade_replaces_and_deletes_nothing(upgraded):
    outcome = upgraded.current("preview")
    assert outcome.returncode == 0, str(outcome)
    assert set(outcome.changes) <= KEEPING, outcome.changes


def test_the_upgrade_keeps_every_job_and_the_names_they_run_under(upgraded):
    outcome = upgraded.current("up")
    assert outcome.returncode == 0, str(outcome)
    assert set(outcome.changes) <= KEEPING, outcome.changes
    jobs = upgraded.jobs()
    assert {name: job["metadata"]["uid"] for name, job in jobs.items()} == upgraded.uids
    assert upgraded.cluster_queues() == upgraded.queues
    # The forced apply of the jobs' unchanged specs (their new label) leaves them admitted and their
    # pods running: Kueue holds them equivalent to their Workloads, no operator recreates a pod.
    for _ in range(OBSERVED_POLLS):  # Kueue and the operators see the update within these
        assert set(upgraded.trainjobs()) <= admitted_jobs(upgraded.cluster.objects, NAMESPACE)
        assert upgraded.bound_pods() == upgraded.pods
        time.sleep(1)
    # Now labelled as this stack's, so a later run and another stack tell them apart.
    for job in jobs.values():
        assert job["metadata"]["labels"][STACK_LABEL] == STACK, job["metadata"]["name"]


def test_after_the_upgrade_a_second_up_changes_nothing_and_destroy_cleans_up(upgraded):
    outcome = upgraded.current("preview")
    assert outcome.returncode == 0, str(outcome)
    assert set(outcome.changes) == {"same"}, outcome.changes
    outcome = upgraded.current("destroy")
    assert outcome.returncode == 0, str(outcome)
    assert not upgraded.jobs()
    assert "trainstack-system" not in upgraded.cluster_queues()
