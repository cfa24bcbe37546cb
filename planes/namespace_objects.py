"""What the stack makes in its training namespace, by kind and name, from the config alone: on a cluster
the stack did not create, each is read before anything is registered (account_checks/namespace_objects.py),
so a same-named object of the namespace's owner or of another stack stops the run with one sentence
instead of being co-owned, overwritten or deleted. tests/planes/test_namespace_objects.py holds this
list to what the program registers."""

from __future__ import annotations

from components.datasets import job_name as dataset_job_name
from components.jobs.kinds import KINDS
from config import StackConfig
from conventions import DEFAULT_DENY_POLICY, HF_TOKEN_SECRET, SYSTEM_GROUP, job_service_account
from planes.jobs import owned_name
from planes.tracking import CREDENTIALS_SECRET

# The REST collection of each kind the stack makes there, under /api or /apis.
COLLECTIONS = {
    "Secret": "api/v1/secrets",
    "ServiceAccount": "api/v1/serviceaccounts",
    "NetworkPolicy": "apis/networking.k8s.io/v1/networkpolicies",
    "LocalQueue": "apis/kueue.x-k8s.io/v1beta2/localqueues",
    "Job": "apis/batch/v1/jobs",
    "PyTorchJob": "apis/kubeflow.org/v1/pytorchjobs",
    "TrainJob": "apis/trainer.kubeflow.org/v1alpha1/trainjobs",
    "RayJob": "apis/ray.io/v1/rayjobs",
    "RayCluster": "apis/ray.io/v1/rayclusters",
}


def training_namespace_objects(cfg: StackConfig) -> list[tuple[str, str]]:
    """(kind, name) of each object the stack makes in cfg.training_namespace."""
    found: list[tuple[str, str]] = [("LocalQueue", SYSTEM_GROUP)]
    found += [("LocalQueue", g.name) for g in cfg.gpu_node_groups]
    if cfg.jobs:
        found.append(("NetworkPolicy", owned_name(cfg, DEFAULT_DENY_POLICY)))
    if cfg.hf_token is not None:
        found.append(("Secret", owned_name(cfg, HF_TOKEN_SECRET)))
    external = cfg.tracking.enabled and cfg.tracking.mode == "external"
    if external and (cfg.tracking_token or cfg.tracking_password):
        found.append(("Secret", CREDENTIALS_SECRET))
    for j in cfg.jobs:
        found += [(j.kind, j.name), ("ServiceAccount", job_service_account(j.name))]
        found += [("NetworkPolicy", a.name) for a in KINDS[j.kind].allows(j.name)]
        if j.environment and cfg.secret_job_env:
            found.append(("Secret", f"{j.name}-env"))
    for d in cfg.datasets:  # read even where none is made (a kubeconfig stack): a read is harmless
        found += [("ServiceAccount", f"dataset-{d.name}"), ("Job", dataset_job_name(d.spec))]
    return found
