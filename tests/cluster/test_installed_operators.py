"""The stack installs its own operators on the tier, through the real engine and provider: the `local`
template's TrainJob on a cluster that runs none of them, so the stack's Helm releases of Trainer (with
JobSet, its subchart) and Kueue go onto the API server as on a user's cluster, from a chart repository
on loopback (`operators.chartRepository`: support/cluster/chart_repository.py, the charts of
../shared/charts). Each pod of their Deployments runs as the pinned upstream program its image is, with
the arguments, config, certificates and service account the chart gave it
(support/cluster/pods.py), and is Ready once its own readiness probe passes; the API server reaches the
charts' webhooks through their Services (`--enable-aggregator-routing`, the pods' addresses local to
this machine). So the webhooks, CRDs and controllers that admit and run the job are the stack's own
install. The training operator and KubeRay are off: the training operator's webhook binds every
interface on the port Kueue's, Trainer's and JobSet's use (test_installed_pytorch.py installs them).

Then: a second `up` changes nothing (`preview --refresh --expect-no-changes`), and `destroy` removes
the releases but leaves every CRD, and another stack's queue, runtime and TrainJob, which a CRD
deleted with its release would have taken with it (Kueue 0.19.2 and Trainer 2.3.0 ship their CRDs as
chart templates). Every `up` and `destroy` runs inside the takeover detector."""

from __future__ import annotations

import pytest
from support.cluster.engine import Engine
from support.cluster.harness import OWN_CLUSTER_GROUP, Cluster
from support.cluster.installed import install_cluster
from support.cluster.objects import admitted_jobs
from support.cluster.stacks import PREBUILT_IMAGE, on_cluster, planned, template_config

from conventions import SYSTEM_GROUP

pytestmark = OWN_CLUSTER_GROUP

INSTALLED = ("kueue-system", "kubeflow-system")  # the releases' namespaces: their pods run as programs
CHARTS = ("kueue-0.19.2", "kubeflow-trainer-2.3.0")
PROGRAMS = {"kueue": 1, "trainer-controller-manager": 1, "jobset-controller": 1}
KEPT_CRDS = (
    "clusterqueues.kueue.x-k8s.io",
    "localqueues.kueue.x-k8s.io",
    "resourceflavors.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "trainjobs.trainer.kubeflow.org",
    "clustertrainingruntimes.trainer.kubeflow.org",
    "trainingruntimes.trainer.kubeflow.org",
    "jobsets.jobset.x-k8s.io",
)
TEAM_B = "team-b"  # another stack's namespace on the same cluster


class InstalledStack:
    def __init__(self, cluster: Cluster, directory, chart_repository: str):
        config = template_config("local")
        config["trainstack:jobs"] = [
            {**j, "wait": "succeeded", "timeoutMinutes": 5}
            for j in config["trainstack:jobs"]
            if j["kind"] == "TrainJob"
        ]
        config["trainstack:operators"] = {
            "chartRepository": chart_repository,
            "trainingOperator": {"enabled": False},
            "kuberay": {"enabled": False},
        }
        self.config = on_cluster(config, cluster.kubeconfig, "trainstack-test")
        self.plan = planned("local", self.config)
        self.cluster = cluster
        self.engine = Engine(directory, cluster.bin_dir, "installed", cluster.objects)
        self.engine.configure(self.config)

    @property
    def namespace(self) -> str:
        return self.plan.cfg.training_namespace


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    with install_cluster(tmp_path_factory, "installed", 223, INSTALLED, CHARTS) as installing:
        cluster = installing.cluster
        stack = InstalledStack(cluster, tmp_path_factory.mktemp("installed-stack"), installing.charts.url)
        system = next(n for n in stack.plan.nodes if n.group == SYSTEM_GROUP)
        count = system.max_nodes
        stack.system_nodes = cluster.add_nodes(
            system, count, [next(installing.pod_ranges) for _ in range(count)]
        )
        stack.pods = installing.pods
        yield stack


def test_up_installs_the_operators_whose_programs_admit_and_run_the_job(installed):
    outcome = installed.engine("up")
    assert outcome.returncode == 0, str(outcome) + "\n" + "\n".join(installed.pods.errors[-5:])
    running = list(installed.pods.programs().values())
    assert {p: running.count(p) for p in set(running)} == PROGRAMS, installed.pods.programs()
    cluster = installed.cluster
    (job,) = installed.config["trainstack:jobs"]
    assert job["name"] in admitted_jobs(cluster.objects, installed.namespace)
    (jobset,) = cluster.objects.list("jobset.x-k8s.io/v1alpha2", "JobSet", installed.namespace)
    assert jobset["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    pods = [
        p
        for p in cluster.core.list_namespaced_pod(installed.namespace).items
        if p.metadata.name.startswith(job["name"])
    ]
    assert len(pods) == job["nodes"] and all(p.spec.node_name in installed.system_nodes for p in pods)
    assert all(PREBUILT_IMAGE in {c.image for c in p.spec.containers} for p in pods)


def test_a_second_up_changes_nothing(installed):
    outcome = installed.engine("unchanged")
    assert outcome.returncode == 0, str(outcome)


def another_stacks_objects(cluster: Cluster) -> dict[tuple[str, str, str], str]:
    """Team B's flavor, queues, runtime and TrainJob (as its own stack would make them), by uid."""
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM_B}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "team-b-cpu"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "team-b"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "team-b-cpu", "resources": [{"name": "cpu", "nominalQuota": "1"}]}],
                    }
                ],
            },
        },
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "team-b", "namespace": TEAM_B},
            "spec": {"clusterQueue": "team-b"},
        },
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "team-b-torch", "labels": {"trainer.kubeflow.org/framework": "torch"}},
            "spec": {
                "mlPolicy": {"numNodes": 1, "torch": {}},
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                    "spec": {
                                        "template": {
                                            "spec": {"containers": [{"name": "node", "image": "team-b/trainer:1"}]}
                                        }
                                    },
                                },
                            }
                        ]
                    }
                },
            },
        },
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "team-b-run", "namespace": TEAM_B, "labels": {"kueue.x-k8s.io/queue-name": "team-b"}},
            "spec": {"runtimeRef": {"name": "team-b-torch"}},
        },
    ]  # fmt: skip
    found = {}
    for obj in objects:
        live = cluster.objects.apply(obj)
        found[(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])] = live["metadata"]["uid"]
    return found


def test_destroy_removes_the_releases_and_leaves_every_crd_and_another_stacks_jobs(installed):
    cluster = installed.cluster
    team_b = another_stacks_objects(cluster)
    outcome = installed.engine("destroy")
    assert outcome.returncode == 0, str(outcome)
    cluster.wait(
        "the releases' Deployments gone",
        lambda: not [d for ns in INSTALLED for d in cluster.objects.list("apps/v1", "Deployment", ns)],
        120,
    )
    for crd in KEPT_CRDS:
        assert cluster.objects.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd), crd
    for (api_version, kind, name), uid in team_b.items():
        namespace = TEAM_B if kind in ("LocalQueue", "TrainJob") else None
        live = cluster.objects.get(api_version, kind, name, namespace)
        assert live is not None and live["metadata"]["uid"] == uid, (kind, name)
