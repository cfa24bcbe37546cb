"""The upstream CRD schemas (../shared/crds) as strict validators: a manifest's unknown field is an
error here, where the API server would silently drop it."""

from __future__ import annotations

import functools
from typing import Any

import jsonschema

from support.charts import load
from support.paths import shared_dir

CRD_FILES = {
    "PyTorchJob": "kubeflow.org_pytorchjobs.yaml",
    "TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
    "ClusterTrainingRuntime": "trainer.kubeflow.org_clustertrainingruntimes.yaml",
    "JobSet": "jobset.x-k8s.io_jobsets.yaml",
    "RayJob": "ray.io_rayjobs.yaml",
    "RayCluster": "ray.io_rayclusters.yaml",
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "AdmissionCheck": "kueue.x-k8s.io_admissionchecks.yaml",
    "ProvisioningRequestConfig": "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
    "Workload": "kueue.x-k8s.io_workloads.yaml",
    "Topology": "kueue.x-k8s.io_topologies.yaml",
    "ProvisioningRequest": "autoscaling.x-k8s.io_provisioningrequests.yaml",
}


def strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused: the API server prunes them silently, so a
    misspelt field would be dropped and the job would run without it. Go's regexps take inline
    flags after `^` (`^(?i)...`); Python's only at the start, where they mean the same."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and pattern.startswith("^(?i)"):
            schema["pattern"] = "(?i)^" + pattern.removeprefix("^(?i)")
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    return schema


@functools.cache
def crd_validator(kind: str, api_version: str) -> jsonschema.Draft7Validator:
    """The schema of `kind` at the version the manifest names (it must be served)."""
    path = shared_dir("crds", "TRAINSTACK_CRDS_DIR") / CRD_FILES[kind]
    crd = load(path)
    group, _, version = api_version.rpartition("/")
    assert crd["spec"]["group"] == group, f"{kind}: {api_version} is not {crd['spec']['group']}"
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version and v["served"]]
    return jsonschema.Draft7Validator(strict(found["schema"]["openAPIV3Schema"]))


def crd_errors(manifest: dict) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in crd_validator(manifest["kind"], manifest["apiVersion"]).iter_errors(manifest)
    ]
