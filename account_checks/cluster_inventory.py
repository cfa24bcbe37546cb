"""What a cluster the stack did not create already runs, read before anything is registered on it.

A SageMaker HyperPod cluster runs the training operator and both device plugins from the start, and
many clusters run KubeRay or Kueue. The stack reads (through cluster_access, with its timeouts) only
what the operators' decisions need: the CRDs the stack's jobs and queues use, by name; the
Deployments and DaemonSets in every namespace (an operator runs wherever its owner put it) as the
server's table of them (metadata and images, no pod spec; an annotation may still copy one, such as
kubectl's last-applied-configuration, which the metadata brings), and
whole only those that run an operator's image; where the identity may not list them cluster-wide (a
namespace-scoped role), in the namespaces the stack concerns (kube-system, its releases', its own), and
what it may not read is kept (`refused`) for the decisions to say; Helm's
release Secrets (Helm 3 keeps each release as `sh.helm.release.v1.<name>.v<N>` labelled owner=helm,
name, status, version: helm pkg/storage/driver/secrets.go) in the namespaces of the stack's own
releases only, and of those their metadata only; and the Configuration a running Kueue was started
with (the ConfigMap its `--config` file is mounted from), which says which job kinds it queues.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from account_checks.cluster_access import ClusterReader
from domain.operators import RELEASES

HELM_OWNER_LABEL = "owner=helm"
HELM_RELEASE_ANNOTATION = "meta.helm.sh/release-name"
HELM_NAMESPACE_ANNOTATION = "meta.helm.sh/release-namespace"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# Where releases before the ownership labels (before issue 43) recorded which operators the stack
# installed on a cluster it did not create: a ConfigMap in the stack's namespace, data {key: installed}.
EARLIER_RECORD = "trainstack-operators"


@dataclass(frozen=True)
class HelmRelease:
    """A release as its latest revision's Secret labels it."""

    namespace: str
    name: str
    status: str
    labels: dict[str, str]


@dataclass(frozen=True)
class ClusterInventory:
    """The cluster's objects as its API answers them (JSON), `kind` set on each."""

    objects: tuple[dict[str, Any], ...]
    refused: tuple[str, ...] = ()  # the paths the identity may not read (403)

    def hidden(self, kind: str) -> tuple[str, ...]:
        """The lists of a workload `kind` that were refused: where the identity could not see it."""
        return tuple(p for p in self.refused if p.split("/")[-1] == WORKLOADS[kind][1])

    def unseen(self, kind: str, crds: tuple[str, ...]) -> tuple[str, ...]:
        """The refused reads an operator could hide in: lists of its workload `kind`, its `crds`."""
        return tuple(p for p in self.refused if p in {f"{CRD_PATH}/{n}" for n in crds}) + self.hidden(kind)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == kind]

    def crd(self, name: str) -> dict[str, Any] | None:
        return self.named("CustomResourceDefinition", None, name)

    def named(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return next(
            (
                o
                for o in self.of_kind(kind)
                if o["metadata"]["name"] == name and o["metadata"].get("namespace") == namespace
            ),
            None,
        )

    def earlier_record(self) -> dict[str, str]:
        """What a release of trainstack before ownership labels recorded it installed, by operator
        key (`installed`), in the ConfigMap `EARLIER_RECORD` of the stack's namespace (read_cluster
        reads it there only)."""
        found = next((o for o in self.of_kind("ConfigMap") if o["metadata"]["name"] == EARLIER_RECORD), {})
        return dict(found.get("data") or {})

    def nodes(self) -> list[dict[str, Any]]:
        """Each node's name and labels (read as metadata only)."""
        return [
            {"name": n["metadata"]["name"], "labels": dict(n["metadata"].get("labels") or {})}
            for n in self.of_kind("Node")
        ]

    def helm_releases(self) -> dict[tuple[str, str], HelmRelease]:
        """(namespace, release) -> its latest revision, from Helm's release Secrets."""
        latest: dict[tuple[str, str], tuple[int, HelmRelease]] = {}
        for s in self.of_kind("Secret"):
            labels = s["metadata"].get("labels") or {}
            if labels.get("owner") != "helm" or "name" not in labels:
                continue
            key = (s["metadata"].get("namespace"), labels["name"])
            version = int(labels.get("version", 0))
            if version >= latest.get(key, (-1, None))[0]:
                latest[key] = (version, HelmRelease(*key, labels.get("status", "unknown"), labels))
        return {k: release for k, (_, release) in latest.items()}


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return ((workload.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []


def images(workload: dict[str, Any]) -> list[str]:
    """The images a workload runs: its containers', or, read as a table row, the row's."""
    if "images" in workload:
        return list(workload["images"])
    return [c["image"] for c in containers(workload) if c.get("image")]


def image_repository(image: str) -> str:
    """An image reference's repository path: no registry host, tag or digest
    (`nvcr.io/nvidia/k8s-device-plugin:v0.17.0` -> `nvidia/k8s-device-plugin`), as the
    distribution reference grammar splits it (a first component with a dot or a colon, or
    `localhost`, is the registry)."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    if ":" in name[slash + 1 :]:
        name = name[: name.rfind(":")]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return rest
    return name


def runs_image(workload: dict[str, Any], repository: str) -> bool:
    """A container of `workload` runs `repository`, from its own registry or any mirror of it
    (a pull-through cache prefixes the path: `<account>.dkr.ecr.../nvcr/nvidia/k8s-device-plugin`)."""
    for image in images(workload):
        path = image_repository(image)
        if path == repository or path.endswith(f"/{repository}"):
            return True
    return False


def describe(obj: dict[str, Any]) -> str:
    """One object as a sentence names it: kind, namespace/name, image tag, owning Helm release."""
    meta = obj["metadata"]
    where = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
    text = f"{obj['kind']} {where}"
    running = images(obj)
    if running:
        text += f" (image {running[0]}"
        release = (meta.get("annotations") or {}).get(HELM_RELEASE_ANNOTATION)
        if release:
            namespace = (meta.get("annotations") or {}).get(HELM_NAMESPACE_ANNOTATION, meta.get("namespace"))
            text += f", Helm release {release} in {namespace}"
        text += ")"
    return text


def config_file(deployment: dict[str, Any]) -> tuple[str, str] | None:
    """The ConfigMap (name, key) a `--config=<path>` argument of the Deployment's containers reads,
    through the volume mounted at that path (whole, or one key by subPath); None without one."""
    pod = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for c in pod.get("containers") or []:
        path = next((a.split("=", 1)[1] for a in c.get("args") or [] if a.startswith("--config=")), None)
        if path is None:
            continue
        for mount in c.get("volumeMounts") or []:
            source = (volumes.get(mount["name"]) or {}).get("configMap")
            if source is None:
                continue
            if mount["mountPath"] == path and mount.get("subPath"):
                return source["name"], mount["subPath"]
            if posixpath.dirname(path) == mount["mountPath"].rstrip("/"):
                return source["name"], posixpath.basename(path)
    return None


def _items(listed: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A list's items; a 404 (no such namespace or API) lists nothing."""
    return (listed or {}).get("items") or []


# The workloads an operator runs as, by kind: their API group and version, and resource.
WORKLOADS = {"Deployment": ("apps/v1", "deployments"), "DaemonSet": ("apps/v1", "daemonsets")}


def table_rows(kind: str, table: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A Table's rows as objects: `kind`, the row's metadata, and its Images cell split."""
    if not table:
        return []
    columns = [c["name"] for c in table.get("columnDefinitions") or []]
    at = columns.index("Images")
    return [
        {
            "kind": kind,
            "metadata": row["object"]["metadata"],
            "images": [i for i in row["cells"][at].split(",") if i],
        }
        for row in table.get("rows") or []
    ]


def _workloads(reader: ClusterReader, kind: str, namespaces: tuple[str, ...]) -> list[dict[str, Any]]:
    """Every `kind` the identity may see, as table rows: cluster-wide, or, refused, per namespace."""
    version, resource = WORKLOADS[kind]
    refused = len(reader.refused)
    listed = reader.get(f"/apis/{version}/{resource}", table=True, refusable=True)
    if len(reader.refused) == refused:
        return table_rows(kind, listed)
    rows: list[dict[str, Any]] = []
    for namespace in namespaces:
        rows += table_rows(
            kind, reader.get(f"/apis/{version}/namespaces/{namespace}/{resource}", table=True, refusable=True)
        )
    return rows


def read_cluster(
    reader: ClusterReader,
    crd_names: tuple[str, ...],
    operator_images: tuple[str, ...],
    config_images: tuple[str, ...],
    record_namespace: str | None = None,
) -> ClusterInventory:
    """The objects the decisions read, as the API answers them: the CRDs named; Deployments and
    DaemonSets as table rows, whole where they run one of `operator_images`; the nodes' metadata (the
    decisions' and the driver check's); the metadata of Helm's release Secrets in the stack's release
    namespaces; the ConfigMap each Deployment running one of `config_images` reads its `--config`
    from; and in `record_namespace` the ownership record an earlier release kept (EARLIER_RECORD).
    A read the identity is refused is kept in the inventory's `refused`, not fatal."""
    objects: list[dict[str, Any]] = []
    for name in crd_names:
        crd = reader.get(f"{CRD_PATH}/{name}", refusable=True)
        if crd is not None:
            objects.append({**crd, "kind": "CustomResourceDefinition"})
    release_namespaces = sorted({chart.namespace for chart in RELEASES.values()})
    concerned = tuple(sorted({"kube-system", *release_namespaces, *filter(None, [record_namespace])}))
    for kind, (version, resource) in WORKLOADS.items():
        for row in _workloads(reader, kind, concerned):
            if any(runs_image(row, i) for i in operator_images):  # whole: its selector, volumes, args
                meta = row["metadata"]
                whole = reader.get(
                    f"/apis/{version}/namespaces/{meta['namespace']}/{resource}/{meta['name']}"
                )
                objects.append({**(whole or row), "kind": kind})
            else:
                objects.append(row)
    # The nodes' metadata: a device plugin serves a group when its DaemonSet selects the group's nodes
    # as they are labelled (by the GPU Operator's controller too), not only as the config describes them.
    nodes = reader.get("/api/v1/nodes", metadata_only=True, refusable=True)
    objects += [{"kind": "Node", "metadata": o["metadata"]} for o in _items(nodes)]
    for namespace in release_namespaces:
        listed = reader.get(
            f"/api/v1/namespaces/{namespace}/secrets",
            {"labelSelector": HELM_OWNER_LABEL},
            metadata_only=True,
            refusable=True,
        )
        objects += [{"kind": "Secret", "metadata": o["metadata"]} for o in _items(listed)]
    for deployment in [o for o in objects if o["kind"] == "Deployment" and "spec" in o]:
        source = config_file(deployment) if any(runs_image(deployment, i) for i in config_images) else None
        if source is not None:
            namespace = deployment["metadata"]["namespace"]
            found = reader.get(f"/api/v1/namespaces/{namespace}/configmaps/{source[0]}", refusable=True)
            if found is not None:
                objects.append({**found, "kind": "ConfigMap"})
    if record_namespace is not None:  # an earlier release's record, read once and migrated
        record = reader.get(
            f"/api/v1/namespaces/{record_namespace}/configmaps/{EARLIER_RECORD}", refusable=True
        )
        if record is not None:
            objects.append({**record, "kind": "ConfigMap"})
    return ClusterInventory(tuple(objects), tuple(reader.refused))
