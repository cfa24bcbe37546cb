"""What a cluster already runs, as offline facts: upstream charts rendered with a real `helm template`
and marked as `helm install` leaves them, for `plan(..., facts=...)`."""

from __future__ import annotations

from pathlib import Path

from conventions import GPU_RESOURCE
from offline.engine.cluster_answers import FACT_PREFIX
from support.charts import helm_template, load
from support.paths import shared_dir

HYPERPOD = "sagemaker-hyperpod-dependencies-0.1.0"
CLUSTER_SCOPED = {"CustomResourceDefinition", "Namespace", "ClusterRole", "ClusterRoleBinding"}


def charts() -> Path:
    return shared_dir("charts", "TRAINSTACK_CHARTS_DIR")


def installed(chart: Path, release: str, namespace: str, values: dict | None = None) -> list[dict]:
    """`helm install` of `chart` as `release` in `namespace`, as the cluster then holds it: the
    rendered objects (CRDs included) in the release namespace, annotated and labelled as Helm does
    (helm pkg/action/validate.go setMetadataVisitor), and the release's Secret as Helm's storage
    driver writes it (pkg/storage/driver/secrets.go: sh.helm.release.v1.<name>.v<N>, labelled
    name, owner=helm, status, version)."""
    objects = helm_template(chart, release, namespace, values, crds=True)
    for o in objects:
        meta = o.setdefault("metadata", {})
        if o["kind"] not in CLUSTER_SCOPED:
            meta.setdefault("namespace", namespace)
        meta["annotations"] = {
            **(meta.get("annotations") or {}),
            "meta.helm.sh/release-name": release,
            "meta.helm.sh/release-namespace": namespace,
        }
        meta["labels"] = {**(meta.get("labels") or {}), "app.kubernetes.io/managed-by": "Helm"}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "helm.sh/release.v1",
        "metadata": {
            "name": f"sh.helm.release.v1.{release}.v1",
            "namespace": namespace,
            "labels": {"name": release, "owner": "helm", "status": "deployed", "version": "1"},
        },
    }
    return [*objects, secret]


def hyperpod_dependencies() -> list[dict]:
    """What a SageMaker HyperPod cluster runs before anyone deploys (../shared/reference/hyperpod-eks.md):
    the dependencies chart's training-operators subchart, and its two device plugins with the
    umbrella's values (the 0.16.1 and 0.5.20 charts are remote: the nearest ones here render them)."""
    umbrella = charts() / HYPERPOD
    values = load(umbrella / "values.yaml")
    release, namespace = "hyperpod-dependencies", "kube-system"
    objects = [
        *installed(umbrella / "charts" / "training-operators", release, namespace),
        *installed(
            charts() / "nvidia-device-plugin-0.20.0",
            release,
            namespace,
            values["nvidia-device-plugin"],
        ),
        *installed(
            charts() / "aws-efa-k8s-device-plugin-v0.5.30",
            release,
            namespace,
            values["aws-efa-k8s-device-plugin"],
        ),
    ]
    # One release, one Secret.
    return list(
        {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o for o in objects}.values()
    )


def as_facts(name: str, objects: list[dict]) -> dict[str, list[dict]]:
    return {f"{FACT_PREFIX}{name}": objects}


def keys(objects: list[dict]) -> set[tuple[str, str | None, str]]:
    """(kind, namespace, name) of each object: two objects with the same key collide."""
    return {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects}


# The NVIDIA GPU Operator's device plugin as the operator lays it down
# (gpu-operator assets/state-device-plugin/0500_daemonset.yaml): it selects the label the operator's
# own controller puts on each GPU node (controllers/state_manager.go), which no group's config describes.
GPU_OPERATOR_DEPLOY_LABEL = "nvidia.com/gpu.deploy.device-plugin"
GPU_OPERATOR_PLUGIN = {
    "apiVersion": "apps/v1",
    "kind": "DaemonSet",
    "metadata": {"name": "nvidia-device-plugin-daemonset", "namespace": "kube-system"},
    "spec": {
        "selector": {"matchLabels": {"app": "nvidia-device-plugin-daemonset"}},
        "template": {
            "metadata": {"labels": {"app": "nvidia-device-plugin-daemonset"}},
            "spec": {
                "nodeSelector": {GPU_OPERATOR_DEPLOY_LABEL: "true"},
                "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {"name": "nvidia-device-plugin", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"}
                ],
            },
        },
    },
}
