"""The names the stack takes on a cluster it did not create, which others share: what it makes in its
training namespace, by kind and name from the config alone, and its cluster-wide objects (queues,
flavors, runtimes, topologies, admission checks), named with the stack's name there. Each is read
before anything is registered (account_checks/namespace_objects.py), so a same-named object of the
namespace's owner or of another stack stops the run with one sentence instead of being co-owned,
overwritten or deleted. tests/planes/test_namespace_objects.py holds these lists to what the program
registers."""

from __future__ import annotations

import pulumi

from account_checks import RunningCluster
from account_checks.cluster_access import ClusterAddress, ClusterReader, ClusterReadError
from account_checks.cluster_rights import Right, check_rights
from account_checks.namespace_objects import check_namespace_objects, keeps_earlier_names, relaunches
from account_checks.world import World
from components.datasets import job_name as dataset_job_name
from components.jobs.kinds import KINDS
from components.queueing import PROVISIONING_CHECK
from config import StackConfig
from conventions import (
    DEFAULT_DENY_POLICY,
    HF_TOKEN_SECRET,
    SYSTEM_GROUP,
    cluster_queue_name,
    in_shared_namespace,
    job_service_account,
)
from domain.topology import NETWORK_LAYERS, topology_name
from planes.account import Account
from planes.jobs import driver_probe_name, owned_name, probes_driver
from planes.operators import cluster_address
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
    # Cluster-wide.
    "ResourceFlavor": "apis/kueue.x-k8s.io/v1beta2/resourceflavors",
    "ClusterQueue": "apis/kueue.x-k8s.io/v1beta2/clusterqueues",
    "Topology": "apis/kueue.x-k8s.io/v1beta2/topologies",
    "AdmissionCheck": "apis/kueue.x-k8s.io/v1beta2/admissionchecks",
    "ProvisioningRequestConfig": "apis/kueue.x-k8s.io/v1beta2/provisioningrequestconfigs",
    "ClusterTrainingRuntime": "apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes",
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
        if probes_driver(cfg, j.node_group):
            found.append(("Job", driver_probe_name(cfg, j.name)))
        found += [("NetworkPolicy", a.name) for a in KINDS[j.kind].allows(j.name)]
        if j.environment and cfg.secret_job_env:
            found.append(("Secret", f"{j.name}-env"))
    for d in cfg.datasets:  # read even where none is made (a kubeconfig stack): a read is harmless
        found += [("ServiceAccount", f"dataset-{d.name}"), ("Job", dataset_job_name(d.spec))]
    return found


def group_queues(cfg: StackConfig) -> list[str]:
    """Each group's ClusterQueue (and flavor and TrainJob runtime) as the program names it."""
    return [cluster_queue_name(g) for g in (SYSTEM_GROUP, *(g.name for g in cfg.gpu_node_groups))]


def cluster_wide_objects(cfg: StackConfig) -> list[tuple[str, str]]:
    """(kind, name) of each cluster-wide object the stack may make, as the program names it."""
    found = [
        (kind, q)
        for q in group_queues(cfg)
        for kind in ("ResourceFlavor", "ClusterQueue", "ClusterTrainingRuntime")
    ]
    found += [(kind, PROVISIONING_CHECK) for kind in ("AdmissionCheck", "ProvisioningRequestConfig")]
    return found + [("Topology", topology_name(n)) for n in sorted(set(NETWORK_LAYERS.values()))]


def cluster_renames(cfg: StackConfig) -> dict[str, str]:
    """Each cluster-wide name the program gives, with the stack's name in it (a name it does not make
    is harmless here: the transform renames only what is sent)."""
    return {
        n: in_shared_namespace(cfg.stack, n.removeprefix("trainstack-")) for _, n in cluster_wide_objects(cfg)
    }


def api_resource(kind: str) -> tuple[str, str]:
    """A kind's API group ("" for core) and resource, from its REST collection."""
    parts = COLLECTIONS[kind].split("/")
    return ("", parts[-1]) if parts[0] == "api" else (parts[1], parts[-1])


def stack_rights(cfg: StackConfig) -> list[Right]:
    """The rights the stack's own objects take: creating and patching each kind it makes in its
    namespace (a dataset's Job only where a bucket holds the data: an EKS stack) and its queues and
    flavors (and a TrainJob group's runtime) cluster-wide, and patching the namespace itself."""
    made = training_namespace_objects(cfg)
    if not cfg.existing_cluster.uses_aws:
        made = [(kind, name) for kind, name in made if kind != "Job"]
    cluster_wide = ["ResourceFlavor", "ClusterQueue"]
    if any(j.kind == "TrainJob" for j in cfg.jobs):
        cluster_wide.append("ClusterTrainingRuntime")
    # Created with a POST, changed later by server-side apply (a patch): both, for each kind.
    rights = [
        Right(verb, *api_resource(kind), namespace)
        for kind, namespace in [
            *((kind, cfg.training_namespace) for kind, _ in made),
            *((kind, None) for kind in cluster_wide),
        ]
        for verb in ("create", "patch")
    ]
    # The training namespace is applied as a patch there (components/pod_identity.py NamespacePatch).
    return [*rights, Right("patch", "", "namespaces", name=cfg.training_namespace)]


def check_stack_rights(cfg: StackConfig, account: Account | None, world: World) -> None:
    """Stops (ClusterRightsError) before anything is read or registered where the stack's identity may
    not make what the stack makes on a cluster it did not create."""
    connect = world.kubernetes_clients(world.session(cfg))
    with ClusterReader(connect, cluster_address(cfg, account), cfg.stack) as reader:
        check_rights(reader, stack_rights(cfg), "make the stack's queues and jobs")


def other_kinds(cfg: StackConfig) -> list[tuple[str, str, str, str]]:
    """Each job's name and kind, with every other kind it could run under and that kind's collection."""
    return [(j.name, j.kind, k, COLLECTIONS[k]) for j in cfg.jobs for k in KINDS if k != j.kind]


def own_cluster_relaunches(cfg: StackConfig, running: RunningCluster | None, world: World) -> None:
    """On the stack's own cluster, once an earlier run made it: a warning per job the stack runs there
    under a kind other than the one configured now, which this `up` replaces (a PyTorchJob that
    became a TrainJob stops and resumes from its checkpoint). A cluster this machine cannot read (a
    private endpoint out of its reach) is said in one warning and passed: the `up` reaches it through
    the provider, or stops there with the provider's own error."""
    if running is None or not cfg.jobs:
        return
    address = ClusterAddress(
        endpoint=running.endpoint, ca_data=running.ca_data, eks_cluster_name=running.name, region=cfg.region
    )
    try:
        with ClusterReader(world.kubernetes_clients(world.session(cfg)), address, cfg.stack) as reader:
            lines = relaunches(reader, cfg, other_kinds(cfg))
    except ClusterReadError as err:
        pulumi.log.warn(
            f"EKS cluster {running.name} could not be read to name the jobs this `up` relaunches under another "
            f"kind ({err.why}); `pulumi preview` lists them as deleted and created"
        )
        return
    for line in lines:
        pulumi.log.warn(line)


def shared_cluster_names(cfg: StackConfig, account: Account | None, world: World) -> dict[str, str]:
    """On a cluster the stack did not create: the renames of its cluster-wide names (none where it
    already runs under the names an earlier release gave it), after every name it would take, in its
    namespace and cluster-wide, is read and found free or its own. Stops (NamespaceObjectsError)
    before anything is registered otherwise. A job of the stack's that runs under another kind than
    configured is named as a relaunch (a warning) before the `up` replaces it."""
    connect = world.kubernetes_clients(world.session(cfg))
    with ClusterReader(connect, cluster_address(cfg, account), cfg.stack) as reader:
        renames = {} if keeps_earlier_names(reader, cfg, group_queues(cfg)) else cluster_renames(cfg)
        wanted = [(kind, name, COLLECTIONS[kind]) for kind, name in training_namespace_objects(cfg)]
        cluster_wide = [
            (kind, renames.get(name, name), COLLECTIONS[kind]) for kind, name in cluster_wide_objects(cfg)
        ]
        check_namespace_objects(reader, cfg, wanted, cluster_wide)
        for line in relaunches(reader, cfg, other_kinds(cfg)):
            pulumi.log.warn(line)
    return renames
