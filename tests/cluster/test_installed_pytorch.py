"""The `existing` template installs the rest of its operators on the tier, through the real engine and
provider: the training operator as its kustomize Directory and KubeRay's CRDs as a ConfigGroup, both
read from `operators.manifestMirror` (support/cluster/manifest_mirror.py: the files at the commits the
stack pins), and the NVIDIA and EFA device plugins and KubeRay as Helm releases from a chart
repository on loopback (`operators.chartRepository`). The cluster runs its own Kueue (the harness's,
the real program), which the stack reuses. Trainer and JobSet are not installed: the template has no
TrainJob, and they are cluster-wide.

The pods of the training operator's and KubeRay's Deployments run as the pinned programs their images
are (support/cluster/pods.py): the training operator's certificate rotator fills the Secret its
bundle makes and injects its CA into the bundle's webhook, which the API server then calls for the
PyTorchJob. The device plugins' pods on the p5 nodes make those nodes advertise their GPUs and EFA
interfaces (support/cluster/kwok.py DevicePlugins), so the PyTorchJob that Kueue admits binds there.

Then: a second `up` changes nothing, and `destroy` removes what the stack installed but leaves every
CRD it applied (`retain_crds`, the releases' keep policy) and the cluster's Kueue. Every `up` and
`destroy` runs inside the takeover detector, which holds the cluster's own Kueue untouched.

The tier's KubeRay is a v1.6.2 build under the 1.7.0 chart (the module proxy serves no 1.7.0 zip):
the chart's three gates 1.7 added, all off, are dropped from its arguments (pods.KUBERAY_GATES)."""

from __future__ import annotations

import random

import pytest
from support.cluster.chart_repository import ChartRepository
from support.cluster.decisions import existing_config
from support.cluster.engine import Engine
from support.cluster.harness import OWN_CLUSTER_GROUP, Cluster
from support.cluster.manifest_mirror import filled_mirror
from support.cluster.objects import admitted_jobs
from support.cluster.pods import OperatorPods, local_pod_range
from support.cluster.stacks import planned

from conventions import SYSTEM_GROUP

pytestmark = OWN_CLUSTER_GROUP

PROBED = ("kubeflow", "kuberay-system")  # their pods run as programs
CHARTS = ("kuberay-operator-1.7.0", "nvidia-device-plugin-0.20.0", "aws-efa-k8s-device-plugin-v0.5.30")
PROGRAMS = {"training-operator": 1, "kuberay-operator": 1}
RELEASE_NAMESPACES = ("kube-system", "kuberay-system")
KEPT_CRDS = (
    "pytorchjobs.kubeflow.org",
    "mpijobs.kubeflow.org",
    "rayclusters.ray.io",
    "rayjobs.ray.io",
    "raycronjobs.ray.io",
    "rayservices.ray.io",
)


def config_selector(config: dict) -> dict[str, str]:
    return dict(config["trainstack:existingCluster"]["systemNodes"]["nodeSelector"])


class InstalledStack:
    def __init__(self, cluster: Cluster, directory, chart_repository: str, mirror):
        config = existing_config(cluster)
        config["trainstack:operators"] = {
            "chartRepository": chart_repository,
            "manifestMirror": str(mirror),
        }
        self.config = config
        self.plan = planned("existing", config)
        self.cluster = cluster
        self.engine = Engine(directory, cluster.bin_dir, "installed-pytorch", cluster.objects)
        self.engine.configure(config)

    @property
    def namespace(self) -> str:
        return self.plan.cfg.training_namespace


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    block = random.randrange(16)  # two harnesses on one machine take different ranges
    pod_network = f"10.224.{16 * block}.0/20"
    cluster = Cluster(tmp_path_factory.mktemp("installed-pytorch-cluster"), probed=PROBED)
    repository = pods = None
    with local_pod_range(pod_network):
        try:
            cluster.start()
            repository = ChartRepository(tmp_path_factory.mktemp("charts"), CHARTS)
            repository.start()
            mirror = filled_mirror(tmp_path_factory.mktemp("manifest-mirror"))
            pods = OperatorPods(
                cluster.api, cluster.kubeconfig, cluster.processes, tmp_path_factory.mktemp("pods"), PROBED
            )
            pods.start()
            stack = InstalledStack(
                cluster, tmp_path_factory.mktemp("installed-stack"), repository.url, mirror
            )
            cidrs = iter(f"10.224.{16 * block + i}.0/24" for i in range(16))
            system = next(n for n in stack.plan.nodes if n.group == SYSTEM_GROUP)
            stack.system_nodes = cluster.add_nodes(
                system, None, [next(cidrs) for _ in range(system.max_nodes)]
            )
            (p5,) = [n for n in stack.plan.nodes if n.group != SYSTEM_GROUP]
            stack.gpu_nodes = cluster.add_nodes(p5, None, [next(cidrs) for _ in range(p5.max_nodes)])
            selector = config_selector(stack.config)
            cluster.operators.kueue(selector)  # the cluster's own, which the stack reuses
            stack.pods = pods
            yield stack
        finally:
            if pods is not None:
                pods.stop()
            if repository is not None:
                repository.stop()
            cluster.stop()


def test_up_installs_the_operators_whose_programs_admit_and_run_the_pytorchjob(installed):
    outcome = installed.engine("up")
    assert outcome.returncode == 0, str(outcome) + "\n" + "\n".join(installed.pods.errors[-5:])
    running = list(installed.pods.programs().values())
    assert {p: running.count(p) for p in set(running)} == PROGRAMS, installed.pods.programs()
    cluster = installed.cluster
    assert not cluster.objects.list("apps/v1", "Deployment", "kubeflow-system")  # no Trainer, no JobSet
    (job,) = installed.config["trainstack:jobs"]
    assert job["name"] in admitted_jobs(cluster.objects, installed.namespace)

    def bound() -> list:
        return [
            p
            for p in cluster.core.list_namespaced_pod(installed.namespace).items
            if p.metadata.name.startswith(job["name"]) and p.spec.node_name
        ]

    cluster.wait("the PyTorchJob's pods bound", lambda: len(bound()) == job["nodes"], 120)
    assert {p.spec.node_name for p in bound()} == set(installed.gpu_nodes)
    # The webhook the API server called for the PyTorchJob is the bundle's, its CA the rotator's.
    (webhook,) = [
        w
        for w in cluster.objects.list("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration")
        if w["metadata"]["name"] == "validator.training-operator.kubeflow.org"
    ]
    assert all(h["clientConfig"].get("caBundle") for h in webhook["webhooks"])


def test_a_second_up_changes_nothing(installed):
    outcome = installed.engine("unchanged")
    assert outcome.returncode == 0, str(outcome)


def test_destroy_removes_what_the_stack_installed_and_keeps_every_crd_and_the_clusters_kueue(installed):
    cluster = installed.cluster
    kueue = cluster.objects.get("apps/v1", "Deployment", "kueue-controller-manager", "kueue-system")
    outcome = installed.engine("destroy")
    assert outcome.returncode == 0, str(outcome)
    cluster.wait(
        "the stack's Deployments and DaemonSets gone",
        lambda: (
            not [
                o
                for ns in (*RELEASE_NAMESPACES, "kubeflow")
                for kind in ("Deployment", "DaemonSet")
                for o in cluster.objects.list("apps/v1", kind, ns)
                if "kueue" not in o["metadata"]["name"]
            ]
        ),
        120,
    )
    for crd in KEPT_CRDS:
        assert cluster.objects.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd), crd
    live = cluster.objects.get("apps/v1", "Deployment", "kueue-controller-manager", "kueue-system")
    assert live is not None and live["metadata"]["uid"] == kueue["metadata"]["uid"]
