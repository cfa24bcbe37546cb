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
# The training operator's bundle (kustomize, components/operators.py TRAINING_OPERATOR): its Deployment.
TRAINING_OPERATOR_DEPLOYMENT = ("kubeflow", "training-operator")

KUEUE_API = "kueue.x-k8s.io/v1beta2"
# What Kueue manages when its Configuration names no framework
# (kueue v0.19.2 apis/config/v1beta2/defaults.go, defaultJobFrameworkName).
KUEUE_DEFAULT_FRAMEWORKS = ("batch/job",)
