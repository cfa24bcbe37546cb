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

Before it, a stack whose namespace holds a user's ServiceAccount of a name it would make stops with one
sentence and creates nothing. Team A's stack is first brought up by the release before this one
(support/cluster/previous_release.py) and then upgraded by this checkout's `up` on the same state:
the operators and their CRDs are the same objects after, and the one relaunch is named first. After it, team B's stack (the same config, its own namespace) reuses
team A's operators and the cluster's Kueue; its queues, flavors and runtime carry its own name, so
both stacks' jobs are admitted, each on its own quota. Then: a second `up` of team A changes nothing,
and team A's `destroy` removes what it installed but leaves every CRD it applied (`retained_crds`, the
releases' keep policy), the cluster's Kueue and all of team B's queues and its job; team B's next `up`
then installs the operators again as its own over the kept CRDs, its job untouched. Every `up` and
`destroy` runs inside the takeover detector, which holds the cluster's own Kueue and each stack's
objects untouched by the other.

The tier's KubeRay is a v1.6.2 build under the 1.7.0 chart (the module proxy serves no 1.7.0 zip):
the chart's three gates 1.7 added, all off, are dropped from its arguments (pods.KUBERAY_GATES)."""

from __future__ import annotations

import pytest
from support.cluster.decisions import existing_config
from support.cluster.engine import Engine
from support.cluster.harness import OWN_CLUSTER_GROUP, Cluster
from support.cluster.installed import install_cluster
from support.cluster.manifest_mirror import filled_mirror
from support.cluster.objects import admitted_jobs
from support.cluster.previous_release import previous_source
from support.cluster.stacks import planned

from conventions import STACK_LABEL, SYSTEM_GROUP

pytestmark = OWN_CLUSTER_GROUP

PROBED = ("kubeflow", "kuberay-system")  # their pods run as programs
CHARTS = ("kuberay-operator-1.7.0", "nvidia-device-plugin-0.20.0", "aws-efa-k8s-device-plugin-v0.5.30")
PROGRAMS = {"training-operator": 1, "kuberay-operator": 1}
TEAM_B = "team-b"  # another team's stack and namespace on the same cluster
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
    def __init__(
        self,
        cluster: Cluster,
        directory,
        chart_repository: str,
        mirror,
        stack: str,
        namespace: str,
        previous_release=None,
    ):
        config = existing_config(cluster)
        config["trainstack:existingCluster"]["namespace"] = namespace
        config["trainstack:operators"] = {
            "chartRepository": chart_repository,
            "manifestMirror": str(mirror),
            # Off for both releases: the previous one installed Trainer whatever the jobs, and its
            # webhooks take the training operator's port here (pods.FLAG_LISTENERS).
            "trainer": {"enabled": False},
        }
        self.config = config
        self.plan = planned(stack, config)
        self.cluster = cluster
        self.engine = Engine(directory, cluster.bin_dir, stack, cluster.objects)
        self.engine.configure(config)
        if previous_release is not None:  # brought up by the release before, then upgraded
            self.previous = Engine(
                directory, cluster.bin_dir, stack, cluster.objects, source=previous_release
            )
            self.previous.configure(config)
            self.engine.detector = self.previous.detector

    @property
    def namespace(self) -> str:
        return self.plan.cfg.training_namespace


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    with install_cluster(tmp_path_factory, "installed-pytorch", 224, PROBED, CHARTS) as installing:
        cluster = installing.cluster
        mirror = filled_mirror(tmp_path_factory.mktemp("manifest-mirror"))
        for namespace in ("training", TEAM_B):  # the cluster owner's, given to each team
            cluster.objects.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

        def stack_of(name: str, namespace: str, previous_release=None) -> InstalledStack:
            folder = tmp_path_factory.mktemp(name)
            return InstalledStack(
                cluster, folder, installing.charts.url, mirror, name, namespace, previous_release
            )

        previous = previous_source(tmp_path_factory.mktemp("previous-release"))
        stack = stack_of("installed-pytorch", "training", previous)
        stack.team_b = stack_of(TEAM_B, TEAM_B)
        stack.refused = stack_of("refused", "training")
        system = next(n for n in stack.plan.nodes if n.group == SYSTEM_GROUP)
        (p5,) = [n for n in stack.plan.nodes if n.group != SYSTEM_GROUP]
        ranges = [next(installing.pod_ranges) for _ in range(system.max_nodes + p5.max_nodes)]
        stack.system_nodes = cluster.add_nodes(system, None, ranges[: system.max_nodes])
        stack.gpu_nodes = cluster.add_nodes(p5, None, ranges[system.max_nodes :])
        cluster.operators.kueue(config_selector(stack.config))  # the cluster's own, which the stack reuses
        stack.pods = installing.pods
        yield stack


def test_a_users_object_of_a_name_the_stack_makes_stops_its_up_before_anything_is_created(installed):
    """The user's own ServiceAccount `job-llama-1b-fsdp` in the namespace: read by name (its metadata,
    from the real API server) before anything is registered, it stops the `up` with one sentence; the
    provider this tier runs would have taken it over, the shipped one would have failed halfway."""
    cluster = installed.cluster
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "job-llama-1b-fsdp", "namespace": "training"}}  # fmt: skip
    cluster.objects.apply(account)
    outcome = installed.refused.engine("up")
    assert outcome.returncode != 0
    assert (
        "ServiceAccount training/job-llama-1b-fsdp is not trainstack's (no app.kubernetes.io/part-of=trainstack "
        "label), and the stack would make one of that name"
    ) in outcome.output
    assert not cluster.objects.list("v1", "Secret", "kuberay-system")  # no release, nothing at all
    assert not cluster.objects.get("v1", "Namespace", "kubeflow")
    cluster.core.delete_namespaced_service_account("job-llama-1b-fsdp", "training")


def operator_uids(cluster) -> dict:
    """The uid of each operator Deployment the stack installs and of the CRDs it applies."""
    found = {
        name: cluster.objects.get("apps/v1", "Deployment", name, namespace)
        for namespace, name in (("kubeflow", "training-operator"), ("kuberay-system", "kuberay-operator"))
    }
    found |= {
        crd: cluster.objects.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)
        for crd in KEPT_CRDS
    }
    return {key: o and o["metadata"]["uid"] for key, o in found.items()}


def replaced(outcome) -> list[str]:
    """The resources an operation replaces, as its output names them (`+-<type>: (replace)`)."""
    return [line.strip() for line in outcome.output.splitlines() if line.strip().endswith("(replace)")]


def test_the_previous_release_installs_the_operators_and_its_job_runs(installed):
    """Team A's stack as the release before this one brought it up: the upgrade below starts here."""
    outcome = installed.previous("up")
    assert outcome.returncode == 0, str(outcome) + "\n" + "\n".join(installed.pods.errors[-5:])
    (job,) = installed.config["trainstack:jobs"]
    cluster = installed.cluster
    cluster.wait(
        "the PyTorchJob admitted", lambda: job["name"] in admitted_jobs(cluster.objects, "training"), 120
    )
    installed.before_upgrade = operator_uids(cluster)
    assert None not in installed.before_upgrade.values(), installed.before_upgrade


def test_the_upgrade_keeps_the_operators_and_their_crds_and_names_its_relaunch(installed):
    """This release's `up` on the same state: no operator installed again and no CRD replaced (their
    uids: the CRDs move to the provider that takes kept ones over, an update), and the job the
    preview names as replaced first is the 1b job, whose checkpoints this release saves by time
    (`--checkpoint-every 0`)."""
    outcome = installed.engine("preview")
    assert outcome.returncode == 0, str(outcome)
    # Not the training operator's webhook certificate Secret, whose generated empty `data` the
    # previous release kept in its inputs (training_operator_bundle).
    assert replaced(outcome) == ["+-kubernetes:kubeflow.org/v1:PyTorchJob: (replace)"], outcome.output[-4000:]
    outcome = installed.engine("up")
    assert outcome.returncode == 0, str(outcome) + "\n" + "\n".join(installed.pods.errors[-5:])
    assert outcome.changes.get("replace", 0) == 1 and not outcome.changes.get("delete"), outcome.changes
    assert operator_uids(installed.cluster) == installed.before_upgrade


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


def test_another_teams_stack_reuses_the_operators_and_queues_its_job_on_its_own_names(installed):
    team_b = installed.team_b
    outcome = team_b.engine("up")
    assert outcome.returncode == 0, str(outcome)
    assert outcome.changes.get("create", 0) > 0 and not outcome.changes.get("delete")
    cluster = installed.cluster
    # Nothing installed twice: one program per operator still.
    running = list(installed.pods.programs().values())
    assert {p: running.count(p) for p in set(running)} == PROGRAMS
    queues = {q["metadata"]["name"] for q in cluster.objects.list("kueue.x-k8s.io/v1beta2", "ClusterQueue")}
    # Team A's under the name its first release gave it (kept: a rename would replace its jobs).
    assert {"trainstack-p5", "trainstack-team-b-p5"} <= queues
    # Each team's job admitted on its own queue's quota (its pods then wait for GPUs team A holds).
    assert "llama-1b-fsdp" in admitted_jobs(cluster.objects, TEAM_B)
    assert "llama-1b-fsdp" in admitted_jobs(cluster.objects, "training")


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
    # Team B's queues, flavors and job are all still there.
    for kind, name in (("ClusterQueue", "trainstack-team-b-p5"), ("ResourceFlavor", "trainstack-team-b-p5")):
        assert cluster.objects.get("kueue.x-k8s.io/v1beta2", kind, name), (kind, name)
    assert cluster.objects.get("kueue.x-k8s.io/v1beta2", "LocalQueue", "p5", TEAM_B)
    assert cluster.objects.get("kubeflow.org/v1", "PyTorchJob", "llama-1b-fsdp", TEAM_B)


def test_the_other_teams_next_up_installs_its_own_operators_over_the_kept_crds(installed):
    """Its operators went with team A's stack, their CRDs stayed (labelled trainstack's): team B's
    read before anything is registered finds the CRDs and no Deployment, and installs the operators
    again as its own, taking the kept CRDs over through its CRD provider (upsertExistingObjects; the
    tier's provider, v4.25.0, upserts every create, the shipped 4.34.2 only through that one: the
    offline plan holds that the CRDs go through it). The CRDs and team B's job are the same objects
    after (their uids), so nothing of what ran on them was lost."""
    team_b, cluster = installed.team_b, installed.cluster
    team_b.engine.detector.rebase()  # what team A removed was not team B's doing
    uids = {
        crd: cluster.objects.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)["metadata"][
            "uid"
        ]
        for crd in KEPT_CRDS
    }
    job = cluster.objects.get("kubeflow.org/v1", "PyTorchJob", "llama-1b-fsdp", TEAM_B)
    outcome = team_b.engine("up")
    assert outcome.returncode == 0, str(outcome)
    assert (
        "trainingOperator: found CRD pytorchjobs.kubeflow.org, kept by an earlier install of trainstack's"
        in outcome.output
    )
    for crd, uid in uids.items():
        assert (
            cluster.objects.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", crd)["metadata"]["uid"]
            == uid
        )
    operator = cluster.objects.get("apps/v1", "Deployment", "training-operator", "kubeflow")
    assert operator["metadata"]["labels"][STACK_LABEL] == TEAM_B
    after = cluster.objects.get("kubeflow.org/v1", "PyTorchJob", "llama-1b-fsdp", TEAM_B)
    assert after["metadata"]["uid"] == job["metadata"]["uid"]
