"""The `hyperpod` template on the real control plane with the real engine, on a cluster that already
runs the HyperPod dependencies chart (a real `helm install`: support/cluster/hyperpod.py, which names
the charts standing in for its remote dependencies) with kwok nodes labelled as the plan's facts give
HyperPod's nodes, and the system nodes. HyperPod's task governance runs Kueue: the harness's Kueue is
the cluster's, and so is its KubeRay. No container runs, so the chart's training operator runs as
training operator v1.7.0 (the version of the chart's image) with the arguments of the chart's
Deployment.

The stack is aimed at the cluster by kubeconfig, with a prebuilt image, the hfToken secret set to a
test value, and the user's FSx claim made beforehand in the namespace the user made, beside the user's
own Secret `hf-token` and NetworkPolicy `default-deny-ingress` (the names the stack gives its own where
it owns the namespace): every `up` and `destroy` runs inside the takeover detector
(support/cluster/takeover.py), so any of the user's objects the stack co-owns, labels or deletes fails
the scenario by name. Its own cluster:
the session's runs other stacks' operators (the local template's training operator at the stack's own
name, in the `kubeflow` namespace the chart makes).

The stack is first brought up by the previous release's program (support/cluster/previous_release.py),
its jobs admitted and bound; this checkout's `up` then upgrades it on the same state, as a user who
pulls and runs `pulumi up` does: no step by hand, the user's and HyperPod's objects untouched (the
same takeover detector around both releases), and only the job whose spec this release changes
relaunched, named in the preview first (their uids)."""

from __future__ import annotations

import base64

import pytest
from support.cluster.engine import Engine
from support.cluster.harness import OWN_CLUSTER_GROUP, Cluster
from support.cluster.hyperpod import TRAINING_OPERATOR, TRAINING_OPERATOR_PROGRAM, install
from support.cluster.objects import admitted_jobs, inventory
from support.cluster.previous_release import previous_source
from support.cluster.stacks import PREBUILT_IMAGE, on_cluster, planned, template_config

from conventions import SYSTEM_GROUP

pytestmark = OWN_CLUSTER_GROUP

SECRETS = {"trainstack:hfToken": "hf_trainstack_test_token"}
# The namespace the second `up` moves to: HyperPod's own (the chart makes it), the other one its
# job auto-resume watches.
MOVED_TO = "kubeflow"
CLUSTER_OPERATORS = (  # the cluster's own besides the chart's: Kueue and KubeRay, as the harness runs them
    ("apps/v1", "Deployment", "kueue-system", "kueue-controller-manager"),
    ("apps/v1", "Deployment", "kuberay-system", "kuberay-operator"),
)
# The user's own objects in each of the user's namespaces, made before the stack's first `up`.
USERS_OWN = (
    {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "hf-token"},
        "stringData": {"HF_TOKEN": "hf_the_users_own_token"},
    },
    {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "default-deny-ingress"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    },
)
CRDS = ("pytorchjobs.kubeflow.org", "rayjobs.ray.io", "rayclusters.ray.io", "workloads.kueue.x-k8s.io")


class HyperPodStack:
    def __init__(self, cluster: Cluster, directory, previous_release):
        config = template_config("hyperpod")
        for job in config["trainstack:jobs"]:
            job["timeoutMinutes"] = 5
            # The template's jobs (4 + 2 nodes) never fit g5's 4 GPUs together, and Kueue orders
            # workloads created in the same second by uid, at random (kueue v0.19.2 pkg/cache/queue
            # cluster_queue.go baseCompareFunc): on this scenario's first run the RayJob was
            # admitted first, and `up` waited on the PyTorchJob's admission (the template then
            # waited for it; the config now refuses such a wait). On 2 nodes both are admitted
            # together, so the scenario sees each job's pods bound.
            if job["kind"] == "PyTorchJob":
                job["nodes"] = 2
        config = on_cluster(config, cluster.kubeconfig, "trainstack-test")
        # By kubeconfig, not by the EKS cluster's name: the stack uses only the kubernetes provider.
        config["trainstack:existingCluster"].pop("eksClusterName")
        self.config = config
        self.plan = planned("hyperpod", config, tuple(SECRETS))
        self.cluster = cluster
        self.previous = Engine(
            directory, cluster.bin_dir, "hyperpod", cluster.objects, source=previous_release
        )
        self.previous.configure(config, SECRETS)
        self.engine = Engine(directory, cluster.bin_dir, "hyperpod", cluster.objects)
        # One stack, upgraded: what was on the cluster before the previous release's first `up` is what
        # every later operation must leave alone.
        self.engine.detector = self.previous.detector

    @property
    def namespace(self) -> str:
        return self.config["trainstack:existingCluster"]["namespace"]

    def jobs(self, namespace: str) -> dict[str, dict]:
        found = {}
        for api_version, kind in (("kubeflow.org/v1", "PyTorchJob"), ("ray.io/v1", "RayJob")):
            for o in self.cluster.objects.list(api_version, kind, namespace):
                found[o["metadata"]["name"]] = o
        return found

    def user_namespace_with_claim(self, namespace: str) -> None:
        """What the user made before the stack: the namespace (unless there), the FSx claim in it,
        bound to a volume (any class: nothing mounts it), and the user's own Secret and
        namespace-wide deny at the names the stack uses in a namespace it owns."""
        claim = self.config["trainstack:existingCluster"]["checkpointClaim"]
        if self.cluster.objects.get("v1", "Namespace", namespace) is None:
            self.cluster.objects.apply(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
        for obj in USERS_OWN:
            self.cluster.objects.apply({**obj, "metadata": {**obj["metadata"], "namespace": namespace}})
        access = {"accessModes": ["ReadWriteMany"], "storageClassName": "fsx-sc"}
        self.cluster.objects.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"fsx-{namespace}"},
                "spec": {
                    **access,
                    "capacity": {"storage": "1200Gi"},
                    "csi": {"driver": "fsx.csi.aws.com", "volumeHandle": f"fs-{namespace}"},
                    "claimRef": {"namespace": namespace, "name": claim},
                },
            }
        )
        self.cluster.objects.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim, "namespace": namespace},
                "spec": {
                    **access,
                    "volumeName": f"fsx-{namespace}",
                    "resources": {"requests": {"storage": "1200Gi"}},
                },
            }
        )
        self.cluster.wait(
            f"claim {namespace}/{claim} bound",
            lambda: (
                (self.cluster.core.read_namespaced_persistent_volume_claim(claim, namespace).status.phase)
                == "Bound"
            ),
        )


def settled(cluster: Cluster) -> bool:
    """Every Deployment and DaemonSet rolled out, their status as the controllers leave it."""
    apps = [
        *cluster.objects.list("apps/v1", "Deployment"),
        *cluster.objects.list("apps/v1", "DaemonSet"),
    ]
    for o in apps:
        status = o.get("status") or {}
        if status.get("observedGeneration") != o["metadata"]["generation"]:
            return False
        if o["kind"] == "Deployment" and status.get("availableReplicas") != o["spec"]["replicas"]:
            return False
        if o["kind"] == "DaemonSet" and status.get("numberReady") != status.get("desiredNumberScheduled"):
            return False
    return True


@pytest.fixture(scope="module")
def hyperpod(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("hyperpod-cluster"))
    try:
        cluster.start()
        previous = previous_source(tmp_path_factory.mktemp("previous-release"))
        stack = HyperPodStack(cluster, tmp_path_factory.mktemp("hyperpod-stack"), previous)
        groups = {n.group: n for n in stack.plan.nodes}
        system = cluster.add_nodes(groups.pop(SYSTEM_GROUP))
        gpu = {name: cluster.add_nodes(node) for name, node in groups.items()}
        stack.chart = install(cluster.kubeconfig, tmp_path_factory.mktemp("hyperpod-chart"))
        cluster.operators.training_operator_of(*TRAINING_OPERATOR, TRAINING_OPERATOR_PROGRAM)
        selector = stack.plan.cfg.existing_cluster.system_nodes.node_selector
        cluster.operators.kuberay(selector)
        cluster.operators.kueue(selector)  # last: it sets up each job kind's integration once served
        stack.user_namespace_with_claim(stack.namespace)
        stack.user_namespace_with_claim(MOVED_TO)
        # The chart's NVIDIA plugin runs on the GPU nodes, which then advertise their GPUs.
        gpu_nodes = [n for names in gpu.values() for n in names]
        cluster.wait(
            "GPUs advertised by the chart's device plugin",
            lambda: all(
                int((cluster.core.read_node(n).status.allocatable or {}).get("nvidia.com/gpu", 0)) > 0
                for n in gpu_nodes
            ),
            120,
        )
        cluster.scheduler_has_seen(gpu_nodes)
        cluster.wait("the cluster's operators rolled out", lambda: settled(cluster), 120)
        stack.system_nodes, stack.gpu_nodes = system, gpu
        stack.before = inventory(cluster)
        stack.chart_before = stack.chart.snapshot(cluster.objects)
        stack.operators_before = operators(cluster)
        assert None not in (*stack.chart_before.values(), *stack.operators_before.values())
        yield stack
    finally:
        cluster.stop()


def operators(cluster: Cluster) -> dict:
    """The uid of each of the cluster's operators besides the chart's, and of the CRDs the jobs use."""
    found = {key: cluster.objects.get(key[0], key[1], key[3], key[2]) for key in CLUSTER_OPERATORS}
    found |= {
        crd: cluster.objects.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd) for crd in CRDS
    }
    return {key: o and o["metadata"]["uid"] for key, o in found.items()}


def admitted(stack: HyperPodStack, namespace: str) -> set[str]:
    return admitted_jobs(stack.cluster.objects, namespace)


def assert_admitted_and_bound(stack: HyperPodStack, namespace: str) -> None:
    job = next(j for j in stack.config["trainstack:jobs"] if j["kind"] == "PyTorchJob")
    nodes = stack.gpu_nodes[job["nodeGroup"]]
    cluster = stack.cluster
    cluster.wait("the PyTorchJob admitted by Kueue", lambda: job["name"] in admitted(stack, namespace), 120)

    def pods():
        return [
            p
            for p in cluster.core.list_namespaced_pod(namespace).items
            if p.metadata.name.startswith(f"{job['name']}-")
        ]

    cluster.wait(
        "the PyTorchJob's pods made by the training operator and bound",
        lambda: len(pods()) == job["nodes"] and all(p.spec.node_name for p in pods()),
        120,
    )
    for p in pods():
        assert p.spec.node_name in nodes, (p.metadata.name, p.spec.node_name)
        assert PREBUILT_IMAGE in {c.image for c in p.spec.containers}, p.metadata.name

    rayjobs = {j["name"] for j in stack.config["trainstack:jobs"] if j["kind"] == "RayJob"}
    cluster.wait("the RayJob admitted beside it", lambda: rayjobs <= admitted(stack, namespace))


def replaced(outcome) -> list[str]:
    """The lines of an operation's output that name a replacement, for the failure's message."""
    lines = outcome.output.splitlines()
    at = [i for i, line in enumerate(lines) if "(replace)" in line]
    return [line for i in at for line in lines[i : i + 80] if line.strip().startswith(("+", "-", "~"))]


def test_the_previous_release_brings_the_stack_up(hyperpod):
    outcome = hyperpod.previous("up")
    assert outcome.returncode == 0, str(outcome)
    assert_admitted_and_bound(hyperpod, hyperpod.namespace)
    hyperpod.uids = {name: job["metadata"]["uid"] for name, job in hyperpod.jobs(hyperpod.namespace).items()}


def test_the_upgrade_reuses_hyperpods_operators_and_relaunches_only_what_the_release_changed(hyperpod):
    """One job is replaced, and the preview says so first: the 1b PyTorchJob, whose checkpoints this
    release saves by time (`--checkpoint-every 0` before the job's args: issue 58, a 13 GB state
    every 50 steps filled S3 with noncurrent versions); it resumes from its checkpoint. The RayJob's
    spec is the same, so it keeps running (its uid), as do the operators and the user's objects."""
    pytorchjob = next(j["name"] for j in hyperpod.config["trainstack:jobs"] if j["kind"] == "PyTorchJob")
    outcome = hyperpod.engine("preview")
    assert outcome.returncode == 0, str(outcome)
    assert outcome.changes.get("replace", 0) <= 1, "\n".join(replaced(outcome))
    diff = "\n".join(replaced(outcome))
    assert diff.startswith("    +-kubernetes:kubeflow.org/v1:PyTorchJob: (replace)"), diff
    assert '"--batch-size" => "--checkpoint-every"' in diff
    outcome = hyperpod.engine("up")
    assert outcome.returncode == 0, str(outcome)
    assert set(outcome.changes) <= {"same", "update", "create", "replace"}, outcome.changes
    assert outcome.changes.get("replace", 0) <= 1, outcome.changes
    assert "AlreadyExists" not in outcome.output
    jobs = hyperpod.jobs(hyperpod.namespace)
    kept = {name: uid for name, uid in hyperpod.uids.items() if name != pytorchjob}
    assert {name: jobs[name]["metadata"]["uid"] for name in kept} == kept
    for key in ("trainingOperator", "nvidiaDevicePlugin", "kueue", "kuberay"):
        assert f"reuse    {key}: found" in outcome.output, (key, str(outcome))
    assert hyperpod.chart.snapshot(hyperpod.cluster.objects) == hyperpod.chart_before
    assert operators(hyperpod.cluster) == hyperpod.operators_before
    assert set(hyperpod.jobs(hyperpod.namespace)) == {j["name"] for j in hyperpod.config["trainstack:jobs"]}
    core = hyperpod.cluster.core
    token = core.read_namespaced_secret("trainstack-hyperpod-hf-token", hyperpod.namespace).data["HF_TOKEN"]
    assert base64.b64decode(token).decode() == SECRETS["trainstack:hfToken"]
    users = core.read_namespaced_secret("hf-token", hyperpod.namespace).data["HF_TOKEN"]
    assert base64.b64decode(users).decode() == "hf_the_users_own_token"
    assert_admitted_and_bound(hyperpod, hyperpod.namespace)


def test_a_changed_namespace_moves_the_jobs_and_deletes_nothing_of_the_clusters(hyperpod):
    old = hyperpod.namespace
    hyperpod.config["trainstack:existingCluster"]["namespace"] = MOVED_TO
    hyperpod.engine.configure(hyperpod.config, SECRETS)
    outcome = hyperpod.engine("up")
    assert outcome.returncode == 0, str(outcome)
    uids = {
        key: found and found[0] for key, found in hyperpod.chart.snapshot(hyperpod.cluster.objects).items()
    }
    assert uids == {key: found[0] for key, found in hyperpod.chart_before.items()}
    assert operators(hyperpod.cluster) == hyperpod.operators_before
    assert set(hyperpod.jobs(MOVED_TO)) == {j["name"] for j in hyperpod.config["trainstack:jobs"]}
    hyperpod.cluster.wait("the jobs gone from the old namespace", lambda: not hyperpod.jobs(old), 120)
    assert_admitted_and_bound(hyperpod, MOVED_TO)


def test_destroy_leaves_hyperpods_objects_and_the_users_claims(hyperpod):
    outcome = hyperpod.engine("destroy")
    assert outcome.returncode == 0, str(outcome)
    cluster = hyperpod.cluster
    try:
        cluster.wait("the stack's objects gone", lambda: inventory(cluster) == hyperpod.before, 120)
    except TimeoutError as err:
        now = inventory(cluster)
        raise AssertionError({"left": now - hyperpod.before, "gone": hyperpod.before - now}) from err
    uids = {key: found and found[0] for key, found in hyperpod.chart.snapshot(cluster.objects).items()}
    assert uids == {key: found[0] for key, found in hyperpod.chart_before.items()}
    assert operators(cluster) == hyperpod.operators_before
