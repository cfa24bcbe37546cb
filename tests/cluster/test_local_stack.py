"""The `local` template on the real control plane with the real engine (`pulumi up`, `preview`,
`destroy` of the unchanged program, CLI and kubernetes provider built from source): a cluster that
already runs Kueue (as the stack installs it), KubeRay, the training operator, Trainer and JobSet,
with kwok nodes shaped as the plan describes the system nodes, and a prebuilt image named where the
stack would build one."""

from __future__ import annotations

import pytest
from support.cluster.engine import Engine
from support.cluster.harness import CLUSTER_GROUP
from support.cluster.stacks import PREBUILT_IMAGE, on_cluster, planned, template_config

from conventions import SYSTEM_GROUP

pytestmark = CLUSTER_GROUP

# What the harness can show of a job: kwok runs pods, not trainers, so a PyTorchJob reaches Running
# (the training operator's condition) and a RayJob is admitted (no Ray dashboard answers KubeRay).
WAITS = {"PyTorchJob": "running", "RayJob": "admitted"}
# The system nodes carry this label besides the template's selector, so the operators' pods, which
# follow the selector, never land on the nodes other tests make once these are gone.
POOL = {"trainstack.test/pool": "local"}
# Kinds whose objects `destroy` must leave as they were before the first `up`.
INVENTORY = (
    ("v1", "Namespace"),
    ("v1", "ServiceAccount"),
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "DaemonSet"),
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("kueue.x-k8s.io/v1beta2", "ResourceFlavor"),
    ("kueue.x-k8s.io/v1beta2", "ClusterQueue"),
    ("kueue.x-k8s.io/v1beta2", "LocalQueue"),
    ("kueue.x-k8s.io/v1beta2", "Workload"),
    ("kubeflow.org/v1", "PyTorchJob"),
    ("ray.io/v1", "RayJob"),
    ("ray.io/v1", "RayCluster"),
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"),
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
    ("jobset.x-k8s.io/v1alpha2", "JobSet"),
)


def inventory(cluster) -> set[tuple[str, str, str]]:
    found = set()
    for api_version, kind in INVENTORY:
        for o in cluster.objects.list(api_version, kind):
            found.add((kind, o["metadata"].get("namespace") or "", o["metadata"]["name"]))
    return found


class LocalStack:
    def __init__(self, cluster, directory):
        config = template_config("local")
        for job in config["trainstack:jobs"]:
            job["wait"] = WAITS[job["kind"]]
            job["timeoutMinutes"] = 5
        config["trainstack:existingCluster"]["systemNodes"]["nodeSelector"] |= POOL
        self.config = on_cluster(config, cluster.kubeconfig, "trainstack-test")
        self.plan = planned("local", self.config)
        self.cluster = cluster
        self.engine = Engine(directory, cluster.bin_dir, "local")
        self.engine.configure(self.config)

    def jobs(self) -> dict[str, dict]:
        found = {}
        for api_version, kind in (("kubeflow.org/v1", "PyTorchJob"), ("ray.io/v1", "RayJob")):
            for o in self.cluster.objects.list(api_version, kind, self.plan.cfg.training_namespace):
                found[o["metadata"]["name"]] = o
        return found


@pytest.fixture(scope="module")
def local(cluster, tmp_path_factory):
    stack = LocalStack(cluster, tmp_path_factory.mktemp("local-stack"))
    system = next(n for n in stack.plan.nodes if n.group == SYSTEM_GROUP)
    nodes = cluster.add_nodes(system)
    selector = stack.plan.cfg.existing_cluster.system_nodes.node_selector
    cluster.operators.kueue(selector)
    cluster.operators.kuberay(selector)
    cluster.operators.training_operator(selector)
    cluster.operators.trainer(selector)
    stack.before = inventory(cluster)
    stack.system_nodes = nodes
    yield stack
    cluster.remove_nodes(nodes)


def test_up_is_accepted_and_every_job_is_admitted_and_bound_where_the_plan_says(local):
    outcome = local.engine("up")
    assert outcome.returncode == 0, str(outcome)
    jobs = local.jobs()
    assert set(jobs) == {j["name"] for j in local.config["trainstack:jobs"]}
    namespace = local.plan.cfg.training_namespace
    workloads = local.cluster.objects.list("kueue.x-k8s.io/v1beta2", "Workload", namespace)
    admitted = {
        (w["metadata"]["ownerReferences"][0]["name"])
        for w in workloads
        if any(
            c["type"] == "Admitted" and c["status"] == "True"
            for c in (w.get("status") or {}).get("conditions") or []
        )
    }
    assert admitted == set(jobs)
    pods = local.cluster.core.list_namespaced_pod(namespace).items
    for job in jobs:
        own = [p for p in pods if job in p.metadata.name]
        assert own, f"no pods of {job}"
        for p in own:
            assert p.spec.node_name in local.system_nodes, (job, p.metadata.name, p.spec.node_name)
            assert p.spec.containers[0].image == PREBUILT_IMAGE


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
    outcome = local.engine("destroy")
    assert outcome.returncode == 0, str(outcome)
    local.cluster.wait("the stack's objects gone", lambda: inventory(local.cluster) == local.before, 120)
