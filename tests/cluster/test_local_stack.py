"""The `local` template on the real control plane with the real engine (`pulumi up`, `preview`,
`destroy` of the unchanged program, CLI and kubernetes provider built from source): a cluster that
already runs Kueue (as the stack installs it), KubeRay, the training operator, Trainer and JobSet,
with kwok nodes shaped as the plan describes the system nodes, and a prebuilt image named where the
stack would build one."""

from __future__ import annotations

import pytest
from support.cluster.engine import Engine
from support.cluster.harness import CLUSTER_GROUP
from support.cluster.objects import admitted_jobs, inventory
from support.cluster.stacks import PREBUILT_IMAGE, on_cluster, planned, template_config

from conventions import SYSTEM_GROUP

pytestmark = CLUSTER_GROUP

# What `up` waits for: the template's waits (`succeeded`), but for the RayJob, whose `succeeded` needs
# Ray's dashboard, which no pod runs here; its admission is read from its Workload below. kwok
# completes a pod of a Job at once, so the TrainJob succeeds (JobSet's jobs complete).
WAITS = {"TrainJob": "succeeded", "RayJob": "none"}
# One system node more than the template's two, so that the system queue holds both jobs at once: a
# relaunched TrainJob is admitted beside the RayJob instead of waiting for every failing attempt of
# it (no Ray runs under kwok; about 35 s each).
SYSTEM_NODES = 3
# The system nodes carry this label besides the template's selector, so the operators' pods, which
# follow the selector, never land on the nodes other tests make once these are gone.
POOL = {"trainstack.test/pool": "local"}


class LocalStack:
    def __init__(self, cluster, directory):
        config = template_config("local")
        for job in config["trainstack:jobs"]:
            job["wait"] = WAITS[job["kind"]]
            job["timeoutMinutes"] = 5
        config["trainstack:existingCluster"]["systemNodes"]["count"] = SYSTEM_NODES
        config["trainstack:existingCluster"]["systemNodes"]["nodeSelector"] |= POOL
        self.config = on_cluster(config, cluster.kubeconfig, "trainstack-test")
        # The offline plan reads no cluster: it plans the stack as if it installed every operator.
        self.plan = planned("local", self.config)
        # The harness's training operator runs at the stack's own name, labelled by no stack: a
        # user whose cluster runs one says `reuse` (on `auto` the stack stops rather than take it
        # for its own).
        self.config["trainstack:operators"] = {"trainingOperator": {"mode": "reuse"}}
        self.cluster = cluster
        self.engine = Engine(directory, cluster.bin_dir, "local", cluster.objects)
        self.engine.configure(self.config)

    def jobs(self) -> dict[str, dict]:
        found = {}
        for api_version, kind in (
            ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
            ("kubeflow.org/v1", "PyTorchJob"),
            ("ray.io/v1", "RayJob"),
        ):
            for o in self.cluster.objects.list(api_version, kind, self.plan.cfg.training_namespace):
                found[o["metadata"]["name"]] = o
        return found


@pytest.fixture(scope="module")
def local(cluster, tmp_path_factory):
    stack = LocalStack(cluster, tmp_path_factory.mktemp("local-stack"))
    system = next(n for n in stack.plan.nodes if n.group == SYSTEM_GROUP)
    nodes = cluster.add_nodes(system)
    selector = stack.plan.cfg.existing_cluster.system_nodes.node_selector
    cluster.operators.start_all(selector)
    cluster.settle()
    stack.before = inventory(cluster)
    stack.system_nodes = nodes
    yield stack
    cluster.remove_nodes(nodes)


def admitted(local) -> set[str]:
    return admitted_jobs(local.cluster.objects, local.plan.cfg.training_namespace)


def pods_of(local, job: str) -> list:
    pods = local.cluster.core.list_namespaced_pod(local.plan.cfg.training_namespace).items
    return [p for p in pods if p.metadata.name.startswith(f"{job}-")]


def test_up_is_accepted_and_every_job_is_admitted_and_bound_where_the_plan_says(local):
    outcome = local.engine("up")
    assert outcome.returncode == 0, str(outcome)
    jobs = local.jobs()
    assert set(jobs) == {j["name"] for j in local.config["trainstack:jobs"]}
    try:
        local.cluster.wait("every job admitted by Kueue", lambda: admitted(local) == set(jobs), 120)
    except TimeoutError as err:
        workloads = local.cluster.objects.list(
            "kueue.x-k8s.io/v1beta2", "Workload", local.plan.cfg.training_namespace
        )
        raise AssertionError(
            [(w["metadata"]["name"], (w.get("status") or {}).get("conditions")) for w in workloads]
        ) from err
    local.cluster.wait(
        "every job's pods made by its operator and bound",
        lambda: all(pods_of(local, j) and all(p.spec.node_name for p in pods_of(local, j)) for j in jobs),
        120,
    )
    # A TrainJob's pods come from the JobSet Trainer made of the job and the stack's runtime.
    jobsets = {
        o["metadata"]["name"]: o["metadata"]["ownerReferences"][0]
        for o in local.cluster.objects.list(
            "jobset.x-k8s.io/v1alpha2", "JobSet", local.plan.cfg.training_namespace
        )
    }
    for name, job in jobs.items():
        if job["kind"] == "TrainJob":
            assert jobsets[name]["kind"] == "TrainJob", jobsets
            assert jobsets[name]["uid"] == job["metadata"]["uid"]
    for job in jobs:
        for p in pods_of(local, job):
            assert p.spec.node_name in local.system_nodes, (job, p.metadata.name, p.spec.node_name)
            assert PREBUILT_IMAGE in {c.image for c in p.spec.containers}, (job, p.metadata.name)


def test_a_second_up_changes_nothing(local):
    outcome = local.engine("preview")
    assert outcome.returncode == 0, str(outcome)
    assert set(outcome.changes) == {"same"}, outcome.changes


def test_changed_steps_relaunch_that_job_only(local):
    before = {name: job["metadata"]["uid"] for name, job in local.jobs().items()}
    changed = local.config["trainstack:jobs"][0]["name"]
    local.config["trainstack:jobs"][0]["steps"] += 10
    local.engine.configure(local.config)
    outcome = local.engine("up")
    assert outcome.returncode == 0, str(outcome)
    after = {name: job["metadata"]["uid"] for name, job in local.jobs().items()}
    assert {n for n in before if before[n] != after[n]} == {changed}
    assert set(outcome.changes) - {"same"} == {"replace"}, outcome.changes
    assert outcome.changes["replace"] == 1


def test_destroy_removes_what_the_stack_made_and_nothing_else(local):
    """On a cluster it did not create, the stack applies its training namespace (a NamespacePatch:
    used if there, made if not) and lets it go on destroy, empty but for what Kubernetes puts in
    every namespace."""
    outcome = local.engine("destroy")
    assert outcome.returncode == 0, str(outcome)
    namespace = local.plan.cfg.training_namespace
    kept = {
        ("Namespace", "", namespace),
        ("ServiceAccount", namespace, "default"),
        ("ConfigMap", namespace, "kube-root-ca.crt"),
    }
    try:
        local.cluster.wait(
            "the stack's objects gone", lambda: inventory(local.cluster) == local.before | kept, 120
        )
    except TimeoutError as err:
        now = inventory(local.cluster)
        raise AssertionError({"left": now - local.before - kept, "gone": local.before - now}) from err
