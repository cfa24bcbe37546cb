"""What the Ray kinds share (KubeRay): the Ray cluster a RayCluster is and a RayJob brings up, its
token authentication, and its pods' network flows."""

from __future__ import annotations

from typing import Any

from components.jobs.pods import WORKDIR, TrainingJobArgs, container_env, pod_template, volumes
from components.network_policy import Allow
from conventions import (
    JOB_LABEL,
    PART_OF,
    RAY_DASHBOARD_PORT,
    RAY_HEAD_ROLE,
    RAY_ROLE_LABEL,
    RAY_WORKER_ROLE,
)
from domain.placement import RAY_HEAD

RAY_VERSION = "2.60.0"  # workload/requirements.txt
# The KubeRay operator's pods, as both its Helm chart (templates/deployment.yaml, the component
# label with componentOverride: kuberay-operator) and its kustomize manifests
# (ray-operator/config/manager/manager.yaml) label them, in whatever namespace an existing cluster
# runs it. It calls each head's dashboard for the job's status (ray-operator/controllers/ray/utils/
# util.go, GetRayDashboardClientFunc, with the cluster's token); KubeRay's own policies leave that
# rule to the platform (networkpolicy_controller.go, buildHeadIngressRules).
KUBERAY_OPERATOR_PODS = {"app.kubernetes.io/component": "kuberay-operator"}

# Ray's token authentication (Ray >= 2.52, KubeRay's ValidateRayClusterSpec refuses an older
# rayVersion): the head's GCS and dashboard refuse a caller without the cluster's token. KubeRay
# generates it, 32 random bytes, in a Secret named after the RayCluster and owned by it
# (raycluster_controller.go, reconcileAuthSecret), sets RAY_AUTH_MODE and RAY_AUTH_TOKEN (from that
# Secret) on the head, the workers and a RayJob's submitter (common/pod.go,
# SetContainerTokenAuthEnvVars; rayjob_controller.go, configureSubmitterContainer), and sends it
# with its own dashboard calls. No secretName: the token never enters the stack's state, and a
# RayJob's cluster gets a new one each run, gone with the cluster.
RAY_AUTH = {"mode": "token"}


def ray_cluster_spec(args: TrainingJobArgs) -> dict[str, Any]:
    job, p = args.job, args.placement
    worker = pod_template(args, {"name": "ray-worker"}, {RAY_ROLE_LABEL: RAY_WORKER_ROLE})
    head_vols, head_mounts = volumes(p, args.checkpoints)
    head = {
        "metadata": {"labels": {**PART_OF, JOB_LABEL: job.name, RAY_ROLE_LABEL: RAY_HEAD_ROLE}},
        "spec": {
            "serviceAccountName": args.service_account,
            "nodeSelector": dict(args.head_selector),
            "containers": [
                {
                    "name": "ray-head",
                    "image": args.image,
                    "workingDir": WORKDIR,
                    "env": container_env(args),
                    "resources": {"requests": dict(RAY_HEAD), "limits": {"memory": RAY_HEAD["memory"]}},
                    "volumeMounts": head_mounts[:1],
                }
            ],
            "volumes": head_vols[:1],
        },
    }
    return {
        "rayVersion": RAY_VERSION,
        "authOptions": dict(RAY_AUTH),
        "headGroupSpec": {
            # No work lands on the head: it runs on a CPU node next to the operators.
            "rayStartParams": {"num-cpus": "0", "dashboard-host": "0.0.0.0"},
            "template": head,
        },
        "workerGroupSpecs": [
            {
                "groupName": p.group,
                "replicas": job.nodes,
                "minReplicas": job.nodes,
                "maxReplicas": job.nodes,
                "rayStartParams": {"num-gpus": str(p.gpus)} if p.gpus else {},
                "template": worker,
            }
        ],
    }


def ray_pod_sets(cluster: dict[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
    """A Ray cluster's PodSets: its head, and one per worker group (kueue's raycluster integration)."""
    sets = [("head", cluster["headGroupSpec"]["template"], 1)]
    groups = cluster.get("workerGroupSpecs") or []
    return sets + [(g["groupName"], g["template"], g.get("replicas", 1)) for g in groups]


def ray_pods(job: str, *roles: str) -> dict[str, Any]:
    """A Ray job's pods in the given roles."""
    return {
        "matchLabels": {JOB_LABEL: job},
        "matchExpressions": [{"key": RAY_ROLE_LABEL, "operator": "In", "values": list(roles)}],
    }


def ray_allows(job: str, *dashboard_callers: dict[str, Any]) -> tuple[Allow, ...]:
    """A Ray cluster's head and workers reach each other on every port (GCS 6379, client 10001,
    dashboard 8265 and its agents, and the node manager, object manager and worker ports, random by
    default), as KubeRay's own policies do (networkpolicy_controller.go, buildBaseIngressRules); its
    head's dashboard takes `dashboard_callers` and the KubeRay operator, nothing else."""
    cluster = ray_pods(job, RAY_HEAD_ROLE, RAY_WORKER_ROLE)
    callers = [
        *dashboard_callers,
        {"namespaceSelector": {}, "podSelector": {"matchLabels": KUBERAY_OPERATOR_PODS}},
    ]
    head = {"matchLabels": {JOB_LABEL: job, RAY_ROLE_LABEL: RAY_HEAD_ROLE}}
    return (
        Allow(f"job-{job}", cluster, ({"podSelector": cluster},)),
        Allow(f"job-{job}-dashboard", head, tuple(callers), (RAY_DASHBOARD_PORT,)),
    )
