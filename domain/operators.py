"""What the stack installs on a cluster, and how it names it there: each chart's release, version
and namespace, the training operator's Deployment, Kueue's API version and the job integrations a
Kueue manages by default. The operators component installs from these, and the read of a
cluster the stack did not create recognises its own and others' by them."""

from __future__ import annotations

from dataclasses import dataclass

# The kubelet's well-known label (k8s.io/api/core/v1 LabelInstanceTypeStable): on EKS the EC2 type, on
# HyperPod the `ml.` type.
INSTANCE_TYPE_NODE_LABEL = "node.kubernetes.io/instance-type"


@dataclass(frozen=True)
class HelmChart:
    release: str
    chart: str
    repository: str
    version: str
    namespace: str


# Versions and sources of everything the stack installs, in one place.
RELEASES = {
    "nvidiaDevicePlugin": HelmChart(
        "nvidia-device-plugin",
        "nvidia-device-plugin",
        "https://nvidia.github.io/k8s-device-plugin",
        "0.20.0",
        "kube-system",
    ),
    "efaDevicePlugin": HelmChart(
        "aws-efa-k8s-device-plugin",
        "aws-efa-k8s-device-plugin",
        "https://aws.github.io/eks-charts",
        "v0.5.30",
        "kube-system",
    ),
    "kuberay": HelmChart(
        "kuberay-operator",
        "kuberay-operator",
        "https://ray-project.github.io/kuberay-helm/",
        "1.7.0",
        "kuberay-system",
    ),
    # Trainer v2 (TrainJob, ClusterTrainingRuntime); JobSet 0.12.0 is its subchart. Its CRDs are
    # chart templates (crds.enabled), so an upgrade updates them.
    "trainer": HelmChart(
        "kubeflow-trainer", "kubeflow-trainer", "oci://ghcr.io/kubeflow/charts", "2.3.0", "kubeflow-system"
    ),
    # The queueing plane's (components/queueing.py).
    "kueue": HelmChart("kueue", "kueue", "oci://registry.k8s.io/kueue/charts", "0.19.2", "kueue-system"),
    "clusterAutoscaler": HelmChart(
        "cluster-autoscaler",
        "cluster-autoscaler",
        "https://kubernetes.github.io/autoscaler",
        "9.59.0",
        "kube-system",
    ),
}


@dataclass(frozen=True)
class GitSource:
    """Manifests the stack applies itself, from a GitHub repository at a full commit (a tag can move)."""

    repository: str  # https://github.com/<owner>/<repo>.git
    path: str
    version: str
    commit: str

    @property
    def slug(self) -> str:
        return self.repository.removeprefix("https://github.com/").removesuffix(".git")

    def url(self, commit: str | None = None) -> str:
        # kustomize's own remote form; GitHub's browser form (.../tree/<ref>/...) fails in
        # kustomize.v2 (pulumi/pulumi-kubernetes#3358).
        return f"{self.repository}//{self.path}?ref={commit or self.commit}"

    def mirrored(self, mirror: str, commit: str | None = None) -> str:
        """Its folder in a copy laid out as raw.githubusercontent.com serves the repository
        (`operators.manifestMirror`: <owner>/<repo>/<commit>/<path>)."""
        return f"{mirror.rstrip('/')}/{self.slug}/{commit or self.commit}/{self.path}"


TRAINING_OPERATOR = GitSource(
    "https://github.com/kubeflow/trainer.git",
    "manifests/overlays/standalone",
    "v1.9.4",
    "4445c12aa62e4345b0c2c6ac9b215a70eca46ed7",  # the commit tag v1.9.4 names
)
# On SageMaker HyperPod: auto-resume is documented for training operator 1.7.0-1.8.1 (AWS's HyperPod
# docs, ../shared/reference/hyperpod-eks.md), so a HyperPod cluster without one gets v1.8.1. Its
# PyTorchJob CRD (manifests/base/crds/kubeflow.org_pytorchjobs.yaml at this commit) has every field the
# stack sets: elasticPolicy.rdzvBackend and rdzvConf, nprocPerNode, runPolicy.suspend.
TRAINING_OPERATOR_HYPERPOD = GitSource(
    TRAINING_OPERATOR.repository,
    TRAINING_OPERATOR.path,
    "v1.8.1",
    "0f8735faade3651dfe44e45c6fbc30fa9152641d",  # the commit tag v1.8.1 names
)


def training_operator_source(hyperpod: bool) -> GitSource:
    return TRAINING_OPERATOR_HYPERPOD if hyperpod else TRAINING_OPERATOR


def training_operator_location(hyperpod: bool, ref: str | None, mirror: str | None) -> str:
    """What the kustomize Directory reads: the overlay at its commit on GitHub, or in the mirror."""
    source = training_operator_source(hyperpod)
    return source.mirrored(mirror, ref) if mirror else source.url(ref)


# The training operator's bundle (kustomize, TRAINING_OPERATOR): its Deployment, and the Secret its
# overlay's secretGenerator makes with no sources (`data: {}`) for the operator's certificate
# rotator to fill.
TRAINING_OPERATOR_DEPLOYMENT = ("kubeflow", "training-operator")
TRAINING_OPERATOR_CERT_SECRET = ("kubeflow", "training-operator-webhook-cert")

# KubeRay's CRDs, as its chart's crds/ holds them (1.7.x): Helm installs crds/ once and never
# upgrades them, so the stack applies them itself, from the commit the chart's tag names
# (KUBERAY_CRD_COMMITS): a tag can be moved, a commit cannot. At v1.7.0's commit the four files are
# byte for byte the chart's crds/.
KUBERAY_CRD_COMMITS = {"1.7.0": "59d663aeec13760646da3db9c1cf8cfe883e30b7"}  # v1.7.0
KUBERAY_CRDS = ("rayclusters", "raycronjobs", "rayjobs", "rayservices")
KUBERAY_REPOSITORY = "ray-project/kuberay"
KUBERAY_CRD_PATH = "helm-chart/kuberay-operator/crds/ray.io_{name}.yaml"
RAW_GITHUB = "https://raw.githubusercontent.com"


def kuberay_crd_files(version: str, mirror: str | None = None) -> list[str]:
    """The CRD files of a chart version KUBERAY_CRD_COMMITS knows, on GitHub or in the mirror
    (the same paths under it)."""
    commit = KUBERAY_CRD_COMMITS[version.removeprefix("v")]
    base = mirror.rstrip("/") if mirror else RAW_GITHUB
    return [f"{base}/{KUBERAY_REPOSITORY}/{commit}/{KUBERAY_CRD_PATH.format(name=n)}" for n in KUBERAY_CRDS]


KUEUE_API = "kueue.x-k8s.io/v1beta2"
# What Kueue manages when its Configuration names no framework
# (kueue v0.19.2 apis/config/v1beta2/defaults.go, defaultJobFrameworkName).
KUEUE_DEFAULT_FRAMEWORKS = ("batch/job",)
