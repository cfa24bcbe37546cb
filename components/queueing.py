"""Queueing plane: Kueue admits each job whole or not at all, and the cluster autoscaler brings up the
nodes an admitted job needs (Kueue's ProvisioningRequest admission check).

Per node group the stack derives a ResourceFlavor (the group's node labels and GPU toleration), a
ClusterQueue whose quota is what the group holds at its largest size, as the jobs request it, and a
LocalQueue in the training namespace; the system group gets one for CPU jobs. Ray heads run on the
system nodes, so each GPU queue also holds a little system-flavor quota for them. A group whose nodes
EKS labels with their EC2 network place gets a flavor naming a Kueue Topology of those labels
(domain/topology.py), which jobs' PodSets ask to be placed in. Both upstream
pieces are installed from their official charts at pinned versions, on the system nodes.

What AWS does not give: the autoscaler's AWS provider has no atomic scale-up
(`AtomicIncreaseSize` is not implemented), so `best-effort-atomic-scale-up` marks a request
Provisioned once its scale-up call succeeds, before the nodes join, and a node that never joins is
given up after `max-node-provision-time`. Kueue's clock (`waitForPodsReady`) therefore starts while
the nodes may still be coming: its timeout covers their joining as well as the image pull.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components.jobs.kinds import KINDS
from components.jobs.pods import RENDEZVOUS_JOIN_TIMEOUT_SECONDS
from components.operators import HelmOperator, helm_release
from conventions import (
    GPU_RESOURCE,
    GPU_TOLERATION,
    PART_OF,
    SYSTEM_GROUP,
    autoscaler_discovery_tags,
)
from domain.operators import KUEUE_API, RELEASES, HelmChart
from domain.quota import QueueSpec, quantity
from domain.topology import levels, topology_name

# The autoscaler's minor version follows the cluster's (git tags cluster-autoscaler-1.3x.y).
AUTOSCALER_IMAGE_TAGS = {"1.33": "v1.33.0", "1.34": "v1.34.5", "1.35": "v1.35.2", "1.36": "v1.36.1"}
AUTOSCALER_SERVICE_ACCOUNT = ("kube-system", "cluster-autoscaler")
# Not in the chart: the CRD lives in the autoscaler's repository, at the image's tag.
PROVISIONING_REQUEST_CRD_URL = (
    "https://raw.githubusercontent.com/kubernetes/autoscaler/cluster-autoscaler-{version}/"
    "cluster-autoscaler/apis/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml"
)
PROVISIONING_CHECK = "trainstack-provisioning"
# Kueue's integrations, one per kind: PyTorchJob is off in the 0.19 chart's defaults (Kubeflow is
# moving to Trainer v2's TrainJob), so it is named here; a Kueue without it would leave PyTorchJobs
# unqueued. Kueue sets an integration up once its CRD is served (kueue v0.19.2
# pkg/controller/jobframework/setup.go WaitForAPI). JobSet is not among them: a TrainJob's JobSet is
# its child, admitted with it (pkg/controller/jobs/trainjob: the TrainJob's PodSets are its JobSet's).
KUEUE_FRAMEWORKS = ("batch/job", *(kind.kueue_framework for kind in KINDS.values()))


def flavor_spec(q: QueueSpec) -> dict[str, Any]:
    """Pods given this flavor get its node labels and tolerations; the stack's pods already carry
    exactly these, so Kueue's injection at admission changes nothing Pulumi applied. A group whose
    nodes EKS labels with their network place names the Topology of those labels."""
    spec: dict[str, Any] = {"nodeLabels": dict(q.placement.node_selector)}
    if q.placement.gpus:
        spec["tolerations"] = [GPU_TOLERATION]
    if q.network_layers:
        spec["topologyName"] = topology_name(q.network_layers)
    return spec


def topology_spec(layers: int) -> dict[str, Any]:
    return {"levels": [{"nodeLabel": label} for label in levels(layers)]}


def cluster_queue_spec(q: QueueSpec, namespace: str) -> dict[str, Any]:
    quota = q.quota()
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        # First in, first out: a large job at the head is not starved by smaller ones behind it.
        "queueingStrategy": "StrictFIFO",
        "resourceGroups": [
            {
                "coveredResources": q.resources,
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {"name": r, "nominalQuota": quantity(r, amounts.get(r, 0))} for r in q.resources
                        ],
                    }
                    for flavor, amounts in quota.items()
                ],
            }
        ],
    }
    if q.provisioned:
        spec["admissionChecksStrategy"] = {
            "admissionChecks": [{"name": PROVISIONING_CHECK, "onFlavors": [q.flavor]}]
        }
    return spec


# Kueue checks for the ProvisioningRequest API once, at start-up, and otherwise never sets up its
# provisioning controller (cmd/kueue/main.go): this pod annotation changes when the autoscaler is
# turned on, so the Helm upgrade that follows the CRD rolls Kueue, and the new pod finds the API.
PROVISIONING_ANNOTATION = "trainstack.dev/provisioning-requests"
# After a running job loses a pod (a lost node), Kueue waits this long for it to be ready again
# before it suspends and requeues the whole job: at least as long as the surviving ranks wait for
# the replacement in the rendezvous, plus its eviction (60 s) and a margin.
RECOVERY_TIMEOUT_MINUTES = RENDEZVOUS_JOIN_TIMEOUT_SECONDS // 60 + 5


def pods_ready_timeout(ready_minutes: int, provision_minutes: int) -> int:
    """Kueue's `waitForPodsReady.timeout`: the pods' own time to be ready (image pull and start),
    after the autoscaler's time to bring their nodes, which AWS does not wait for before admission."""
    return ready_minutes + provision_minutes


def kueue_manager_config(pods_ready_timeout_minutes: int) -> dict[str, Any]:
    """Kueue's whole manager config (the chart takes it as one string, so nothing of its default
    survives unless repeated here)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {
            "groupKindConcurrency": {
                "Job.batch": 5,
                "Pod": 5,
                "Workload.kueue.x-k8s.io": 10,
                "LocalQueue.kueue.x-k8s.io": 5,
                "ClusterQueue.kueue.x-k8s.io": 5,
                "ResourceFlavor.kueue.x-k8s.io": 1,
            }
        },
        "clientConnection": {"qps": 300, "burst": 500},
        # A job whose pods are not all ready in time (a node that never joined, an image that does
        # not pull) is evicted and requeued, so its quota goes to the next job.
        "waitForPodsReady": {
            "timeout": f"{pods_ready_timeout_minutes}m",
            "recoveryTimeout": f"{RECOVERY_TIMEOUT_MINUTES}m",
            "blockAdmission": False,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffLimitCount": 5,
                "backoffBaseSeconds": 60,
                "backoffMaxSeconds": 3600,
            },
        },
        "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
    }


# The chart as git holds it names a staging image at `release-0.19` (pulled Always); the published
# 0.19.2 chart names the release image (kubernetes-sigs/kueue hack/helm-chart-package.sh rewrites
# controllerManager.manager.image when it packages a promoted tag). The stack pins the published
# values, so a mirror of either copy runs the release.
KUEUE_IMAGE = {"repository": "registry.k8s.io/kueue/kueue", "tag": "v0.19.2", "pullPolicy": "IfNotPresent"}


def kueue_values(
    pods_ready_timeout_minutes: int,
    system_selector: dict[str, str],
    provisioning: bool,
) -> dict[str, Any]:
    annotation = {PROVISIONING_ANNOTATION: "enabled" if provisioning else "disabled"}
    return {
        "controllerManager": {
            "nodeSelector": dict(system_selector),
            "manager": {"podAnnotations": annotation, "image": dict(KUEUE_IMAGE)},
        },
        "managerConfig": {
            "controllerManagerConfigYaml": yaml.safe_dump(
                kueue_manager_config(pods_ready_timeout_minutes), sort_keys=False
            )
        },
    }


def autoscaler_values(
    cluster_name: str,
    region: str,
    kubernetes_version: str,
    idle_minutes: int,
    provision_minutes: int,
    system_selector: dict[str, str],
    startup_minutes: int | None = None,
) -> dict[str, Any]:
    """`startup_minutes`: how long a node may stay not ready once registered (a health gate's
    burn-in) before the autoscaler takes it as unready and scales up again (its flag from 1.35)."""
    startup = {"max-node-startup-time": f"{startup_minutes}m"} if startup_minutes else {}
    return {
        "cloudProvider": "aws",
        "awsRegion": region,
        "autoDiscovery": {"clusterName": cluster_name, "tags": list(autoscaler_discovery_tags(cluster_name))},
        "image": {"tag": AUTOSCALER_IMAGE_TAGS[kubernetes_version]},
        "rbac": {"serviceAccount": {"name": AUTOSCALER_SERVICE_ACCOUNT[1]}},
        "nodeSelector": dict(system_selector),
        "extraArgs": {
            "enable-provisioning-requests": True,
            "scale-down-unneeded-time": f"{idle_minutes}m",
            # p5 nodes can take longer than the 15-minute default to join.
            "max-node-provision-time": f"{provision_minutes}m",
            "expander": "least-waste",
            "balance-similar-node-groups": False,
            # Training pods keep checkpoints and /dev/shm in emptyDir; idle nodes must still go.
            "skip-nodes-with-local-storage": False,
            **startup,
        },
    }


def provisioning_request_crd_url(kubernetes_version: str) -> str:
    return PROVISIONING_REQUEST_CRD_URL.format(
        version=AUTOSCALER_IMAGE_TAGS[kubernetes_version].removeprefix("v")
    )


@dataclass(frozen=True)
class QueueingArgs:
    provider: k8s.Provider
    system_nodes: pulumi.Resource
    operators: list[pulumi.Resource]  # Kueue sets up an integration only once its CRDs exist
    namespace: pulumi.Resource
    namespace_name: str
    queues: list[QueueSpec]
    kueue: HelmOperator
    cluster_autoscaler: HelmOperator
    cluster_name: str
    system_selector: dict[str, str]  # where Kueue and the autoscaler run
    region: str
    kubernetes_version: str
    idle_node_minutes: int
    pods_ready_timeout_minutes: int
    max_node_provision_minutes: int
    autoscaler_identity: pulumi.Resource | None  # its Pod Identity association
    max_node_startup_minutes: int | None = None  # a health gate's burn-in past the autoscaler's default


class Queueing(pulumi.ComponentResource):
    def __init__(self, name: str, args: QueueingArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:queueing:Queueing", name, None, opts)
        self._args = args
        self.installed_charts: dict[str, HelmChart] = {}
        provisioned = any(q.provisioned for q in args.queues)
        self.provisioning_crd = None
        if provisioned:  # the autoscaler is on: QueueSpec.provisioned says so
            self.provisioning_crd = k8s.yaml.v2.ConfigGroup(
                f"{name}-provisioning-request-crd",
                files=[provisioning_request_crd_url(args.kubernetes_version)],
                opts=pulumi.ResourceOptions(parent=self, provider=args.provider),
            )
        timeout = pods_ready_timeout(
            args.pods_ready_timeout_minutes, args.max_node_provision_minutes if provisioned else 0
        )
        kueue = self._helm(
            "kueue",
            args.kueue,
            kueue_values(timeout, args.system_selector, provisioned),
            [*args.operators, *filter(None, [self.provisioning_crd])],  # the API exists when Kueue starts
        )
        if provisioned:
            self._helm(
                "clusterAutoscaler",
                args.cluster_autoscaler,
                autoscaler_values(
                    args.cluster_name,
                    args.region,
                    args.kubernetes_version,
                    args.idle_node_minutes,
                    args.max_node_provision_minutes,
                    args.system_selector,
                    args.max_node_startup_minutes,
                ),
                [self.provisioning_crd, *filter(None, [args.autoscaler_identity])],
            )
        self._kueue_deps = [r for r in (kueue, self.provisioning_crd) if r is not None]
        self.admission_check = None
        if provisioned:
            config = self._kueue_object(
                "ProvisioningRequestConfig",
                PROVISIONING_CHECK,
                {
                    # Asks for all of a job's nodes at once (on AWS, not atomically: see above).
                    "provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                    "managedResources": [GPU_RESOURCE],
                    "retryStrategy": {
                        "backoffLimitCount": 3,
                        "backoffBaseSeconds": 60,
                        "backoffMaxSeconds": 1800,
                    },
                },
            )
            self.admission_check = self._kueue_object(
                "AdmissionCheck",
                PROVISIONING_CHECK,
                {
                    "controllerName": "kueue.x-k8s.io/provisioning-request",
                    "parameters": {
                        "apiGroup": "kueue.x-k8s.io",
                        "kind": "ProvisioningRequestConfig",
                        "name": PROVISIONING_CHECK,
                    },
                },
                [config],
            )
        self.topologies = {
            layers: self._kueue_object("Topology", topology_name(layers), topology_spec(layers))
            for layers in sorted({q.network_layers for q in args.queues if q.network_layers})
        }
        flavors = {}
        for q in sorted(args.queues, key=lambda q: q.group != SYSTEM_GROUP):
            topology = [self.topologies[q.network_layers]] if q.network_layers else []
            flavors[q.flavor] = self._kueue_object("ResourceFlavor", q.flavor, flavor_spec(q), topology)
        self.cluster_queues = {}
        for q in args.queues:
            used = [flavors[f] for f in q.quota()]
            checks = [self.admission_check] if q.provisioned and self.admission_check else []
            self.cluster_queues[q.group] = self._kueue_object(
                "ClusterQueue", q.flavor, cluster_queue_spec(q, args.namespace_name), [*used, *checks]
            )
        self.local_queues = {
            q.group: self._kueue_object(
                "LocalQueue",
                q.group,
                {"clusterQueue": q.flavor},
                [self.cluster_queues[q.group], args.namespace],
                namespace=args.namespace_name,
            )
            for q in args.queues
        }
        self.register_outputs(
            {"helmReleases": list(self.installed_charts), "localQueues": list(self.local_queues)}
        )

    def _helm(
        self,
        key: str,
        operator: HelmOperator,
        values: dict[str, Any],
        deps: list[pulumi.Resource],
    ) -> k8s.helm.v3.Release | None:
        if not operator.enabled:
            return None
        chart = RELEASES[key]
        release = helm_release(
            chart,
            operator,
            values,
            pulumi.ResourceOptions(
                parent=self,
                provider=self._args.provider,
                depends_on=[*filter(None, [self._args.system_nodes]), *deps],
            ),
        )
        self.installed_charts[key] = chart
        return release

    def _kueue_object(
        self,
        kind: str,
        name: str,
        spec: dict[str, Any],
        deps: list[pulumi.Resource] | None = None,
        namespace: str | None = None,
    ) -> k8s.apiextensions.CustomResource:
        metadata: dict[str, Any] = {"name": name, "labels": dict(PART_OF)}
        if namespace:
            metadata["namespace"] = namespace
        return k8s.apiextensions.CustomResource(
            f"{kind.lower()}-{name}",
            api_version=KUEUE_API,
            kind=kind,
            metadata=metadata,
            spec=copy.deepcopy(spec),
            opts=pulumi.ResourceOptions(
                parent=self, provider=self._args.provider, depends_on=[*self._kueue_deps, *(deps or [])]
            ),
        )
