"""Cluster objects shaped like real ones (nodes, DaemonSets, jobs, Kueue Workloads, logs) for
`trainstack` run against the local API server in kube_server.py, and a run of the command."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from cli.analysis import findings
from cli.main import main
from conventions import job_service_account
from support.crds import crd_errors
from support.kube_server import FakeCluster, KubeServer

NS = "training"
CREATED = "2026-11-21T10:00:00Z"


def meta(name: str, namespace: str | None = None, **labels: str) -> dict:
    m = {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "creationTimestamp": CREATED}
    if namespace:
        m["namespace"] = namespace
    if labels:
        m["labels"] = labels
    return m


def node(name: str, group: str | None, ready: bool = True, gpus: int = 8, efa: int = 32) -> dict:
    labels = {"kubernetes.io/hostname": name}
    allocatable = {"cpu": "191450m", "memory": "2033000000Ki", "pods": "100"}
    if group:
        labels |= {"trainstack.dev/node-group": group, "nvidia.com/gpu.present": "true"}
        if efa:
            labels["vpc.amazonaws.com/efa.present"] = "true"
        allocatable |= {"nvidia.com/gpu": str(gpus), "vpc.amazonaws.com/efa": str(efa)}
    else:
        labels["trainstack.dev/role"] = "system"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta(name, **labels),
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady"},
            ],
        },
    }


def daemonset(name: str, desired: int, ready: int) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": meta(name, "kube-system"),
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": name}]}},
        },
        "status": {
            "currentNumberScheduled": desired,
            "desiredNumberScheduled": desired,
            "numberMisscheduled": 0,
            "numberReady": ready,
        },
    }


def deployment(name: str, namespace: str, ready: int = 1) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(name, namespace),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": name}]}},
        },
        "status": {"replicas": 1, "readyReplicas": ready} if ready else {"replicas": 1},
    }


def crd(name: str) -> dict:
    plural, group = name.split(".", 1)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": meta(name),
        "spec": {
            "group": group,
            "names": {"plural": plural, "kind": plural.rstrip("s").capitalize()},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True}],
        },
    }


def webhook(name: str) -> dict:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": meta(name),
        "webhooks": [
            {
                "name": "validate.pytorchjob.kubeflow.org",
                "clientConfig": {"service": {"name": "training-operator", "namespace": "kubeflow"}},
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
            }
        ],
    }


def pod(name: str, job: str, group: str, *, index: int | None = 0, phase: str = "Running", ray: str | None = None,
        waiting: dict | None = None, restarts: int = 0, env: tuple[str, ...] = ("AWS_CONTAINER_CREDENTIALS_FULL_URI",),
        scheduled: dict | None = None, jobset: bool = False) -> dict:  # fmt: skip
    """A job's pod as its operator labels it: the training operator's (index), KubeRay's (ray), or
    with `jobset` a TrainJob's, as JobSet and the Job controller label it."""
    labels = {"trainstack.dev/job": job}
    if ray:
        labels["ray.io/node-type"] = ray
    elif jobset:
        labels |= {
            "jobset.sigs.k8s.io/jobset-name": job,
            "jobset.sigs.k8s.io/replicatedjob-name": "node",
            "batch.kubernetes.io/job-completion-index": str(index),
        }
    elif index is not None:
        labels |= {
            "training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": str(index),
        }
    ready = phase == "Running" and not waiting
    status: dict = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if scheduled:
        status["conditions"].append({"type": "PodScheduled", **scheduled})
    if phase == "Running":
        status["containerStatuses"] = [
            {
                "name": "pytorch",
                "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack/prod/training@sha256:abc",
                "imageID": "",
                "ready": ready,
                "restartCount": restarts,
                "state": {"waiting": waiting} if waiting else {"running": {"startedAt": CREATED}},
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(name, NS, **labels),
        "spec": {
            "serviceAccountName": job_service_account(job),
            "nodeSelector": {"trainstack.dev/node-group": group},
            "containers": [
                {"name": "pytorch", "image": "img", "env": [{"name": e, "value": "x"} for e in env]}
            ],
        },
        "status": status,
    }


def pytorchjob(name: str, replicas: int, *conditions: tuple[str, str]) -> dict:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": meta(name, NS),
        "spec": {
            "nprocPerNode": "8",
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": replicas,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "img"}]}},
                }
            },
        },
        "status": {
            "conditions": [{"type": t, "status": s, "lastTransitionTime": CREATED} for t, s in conditions],
            "replicaStatuses": {"Worker": {"active": replicas}},
        },
    }


def trainjob(name: str, nodes: int, *conditions: tuple[str, str], ready: int = 0) -> dict:
    jobs = {"name": "node", "ready": ready, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": meta(name, NS),
        "spec": {"runtimeRef": {"name": "trainstack-p5"}, "trainer": {"numNodes": nodes}},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": t, "message": "", "lastTransitionTime": CREATED}
                for t, s in conditions
            ],
            "jobsStatus": [jobs],
        },
    }


def ray_cluster_spec(workers: int) -> dict:
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [{"name": "ray-head"}]}}},
        "workerGroupSpecs": [
            {"groupName": "gpu", "replicas": workers, "minReplicas": workers, "maxReplicas": workers, "rayStartParams": {},
             "template": {"spec": {"containers": [{"name": "ray-worker"}]}}}
        ],
    }  # fmt: skip


def rayjob(name: str, job_status: str, deployment_status: str) -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": meta(name, NS),
        "spec": {"entrypoint": "python -m trainer.ray_train", "rayClusterSpec": ray_cluster_spec(1)},
        "status": {"jobStatus": job_status, "jobDeploymentStatus": deployment_status},
    }


def raycluster(name: str, state: str) -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": meta(name, NS),
        "spec": ray_cluster_spec(1),
        "status": {
            "state": state,
            "conditions": [
                {"type": "RayClusterProvisioned", "status": "True" if state == "ready" else "False",
                 "reason": "AllPodRunningAndReadyFirstTime", "message": "", "lastTransitionTime": CREATED}
            ],
        },
    }  # fmt: skip


METRICS = "\n".join(
    [
        'metrics {"event": "start", "resumed_from": 0}',
        'metrics {"step": 10, "loss": 4.2, "tokens_per_s": 1200000.0, "mfu": 0.41, "goodput": 0.97}',
        "metrics {not json",
        'metrics {"step": 20, "loss": 3.9, "val_loss": 3.95, "tokens_per_s": 1300000.0, "mfu": 0.44}',
        "NCCL INFO Using network Libfabric",
        'metrics {"step": "x", "loss": 1}',
    ]
)


def condition(kind: str, status: str, reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason or kind, "message": message,
            "lastTransitionTime": CREATED}  # fmt: skip


def workload(job: str, queue: str, *conditions: dict, kind: str = "PyTorchJob", created: str = CREATED,
             checks: list[dict] | None = None) -> dict:  # fmt: skip
    """Kueue's Workload for a job, as Kueue writes it (v1beta2): owned by the job."""
    name = f"{kind.lower()}-{job}-1a2b3"
    obj = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            **meta(name, NS),
            "creationTimestamp": created,
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": kind,
                    "name": job,
                    "uid": f"uid-{job}",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "queueName": queue,
            "podSets": [
                {"name": "worker", "count": 2, "template": {"spec": {"containers": [{"name": "pytorch"}]}}}
            ],
        },
        "status": {"conditions": list(conditions)},
    }
    if checks is not None:
        obj["status"]["admissionChecks"] = checks
    return obj


def provisioning_request(workload_name: str, *conditions: dict) -> dict:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1",
        "kind": "ProvisioningRequest",
        "metadata": {
            **meta(f"{workload_name}-trainstack-provisioning-1", NS),
            "creationTimestamp": CREATED,
            "ownerReferences": [
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "Workload",
                    "name": workload_name,
                    "uid": "uid-wl",
                }
            ],
        },
        "spec": {
            "provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
            "podSets": [{"count": 2, "podTemplateRef": {"name": f"ppt-{workload_name}-worker"}}],
        },
        "status": {"conditions": list(conditions)},
    }


ADMITTED = (condition("QuotaReserved", "True"), condition("Admitted", "True"))


def healthy() -> FakeCluster:
    c = FakeCluster()
    c.nodes = [node("ip-10-0-0-1", None), node("ip-10-0-2-1", "p5"), node("ip-10-0-2-2", "p5")]
    c.daemonsets = [
        daemonset("nvidia-device-plugin", 2, 2),
        daemonset("aws-efa-k8s-device-plugin-daemonset", 2, 2),
    ]
    c.deployments = [
        deployment("training-operator", "kubeflow"),
        deployment("kubeflow-trainer-controller-manager", "kubeflow-system"),
        deployment("jobset-controller", "kubeflow-system"),
        deployment("kuberay-operator", "kuberay-system"),
        deployment("kueue-controller-manager", "kueue-system"),
        deployment("cluster-autoscaler-aws-cluster-autoscaler", "kube-system"),
    ]
    c.crds = [crd(n) for n in findings.REQUIRED_CRDS]
    c.webhooks = [webhook("validator.training-operator.kubeflow.org")]
    c.pods = [pod("fsdp-worker-0", "fsdp", "p5", index=0), pod("fsdp-worker-1", "fsdp", "p5", index=1)]
    c.custom[("pytorchjobs", "fsdp")] = pytorchjob("fsdp", 2, ("Created", "True"), ("Running", "True"))
    c.workloads = [workload("fsdp", "p5", *ADMITTED)]
    c.provisioning_requests = []
    c.logs = {"fsdp-worker-0": METRICS, "fsdp-worker-1": "rank 1 up\nNCCL INFO Using network Libfabric"}
    return c


OUTPUTS = {
    "trainingNamespace": NS,
    "gpuNodeGroups": {"p5": {"nodeGroupName": "trainstack-prod-p5", "instanceType": "p5.48xlarge", "nodes": 2,
                             "minNodes": 0, "autoscaled": True, "gpusPerNode": 8, "efaInterfacesPerNode": 32}},
    "jobs": {"fsdp": {"kind": "PyTorchJob", "nodeGroup": "p5", "nodes": 2, "gpus": 16, "hourlyUsd": 110.08}},
}  # fmt: skip


def run(cluster: FakeCluster, tmp_path: Path, *argv: str, outputs: dict | None = None) -> tuple[int, str]:
    for obj in [*cluster.custom.values(), *(cluster.workloads or []), *(cluster.provisioning_requests or [])]:
        assert crd_errors(obj) == [], obj["metadata"]["name"]  # fixtures are real custom resources
    with KubeServer(cluster) as server:
        path = tmp_path / "outputs.json"
        path.write_text(json.dumps({**(outputs or OUTPUTS), "kubeconfig": server.kubeconfig()}))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main([*argv, "--outputs", str(path)])
    return code, out.getvalue()
