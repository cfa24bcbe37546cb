"""Training jobs as stack resources: PyTorchJob, RayJob, RayCluster, each queued through Kueue.

A job's config says what to train and where; everything else is derived from the node group it
runs on: GPUs and EFA interfaces per node (requests = limits), the NCCL/libfabric environment on
EFA groups only, CPU and memory requests that leave room for the node's daemons, a memory-backed
/dev/shm, the node selector and the GPU toleration, and checkpoints mirrored to the stack's bucket
so a relaunch resumes. Each job's Kubernetes name is fixed and a spec change replaces it (delete
first), so a config change plus `pulumi up` relaunches it; unchanged config leaves it running.

Every job carries its node group's queue label: Kueue suspends it at creation and resumes it once
the whole job is admitted (and, on an autoscaled group, its nodes exist). The suspend fields and
what Kueue injects at admission are Kueue's; the program never sets them, and its pods already
carry their flavor's node labels and toleration. On a group whose nodes are checked, the default
trainer checks its own nodes (GPUs, EFA devices, NCCL over EFA, bus bandwidth) before step 0.
"""

from __future__ import annotations

import shlex
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import verl as verl_job
from components.job_pods import (
    CHECKPOINT_DIR,
    DELETE_TIMEOUT,
    RAY_VERSION,
    RENDEZVOUS_JOIN_TIMEOUT_SECONDS,
    WORKDIR,
    TrainingJobArgs,
    container_env,
    pod_template,
    trainer_args,
    volumes,
)
from conventions import (
    HYPERPOD_AUTO_RESUME_ANNOTATION,
    HYPERPOD_MAX_RETRY_ANNOTATION,
    JOB_LABEL,
    NODE_GROUP_LABEL,
    PART_OF,
    QUEUE_LABEL,
    RAY_DASHBOARD_PORT,
    RAY_HEAD_ROLE,
    RAY_ROLE_LABEL,
    RAY_SUBMITTER_ROLE,
    RAY_WORKER_ROLE,
)
from domain.catalog import is_sagemaker_type
from domain.placement import RAY_HEAD, RAY_SUBMITTER
from stack_outputs import JobSummary

# What `pulumi up` waits for, per kind and mode (pulumi-kubernetes `pulumi.com/waitFor`).
# "admitted": Kueue resumed the job (its suspend field turns false once the whole job is admitted
# and its nodes exist). A PyTorchJob's Running condition flips to False when it finishes, so
# "running" also accepts Succeeded; a RayJob has no conditions, only status.jobStatus.
WAIT_FOR = {
    ("PyTorchJob", "admitted"): "jsonpath={.spec.runPolicy.suspend}=false",
    ("RayJob", "admitted"): "jsonpath={.spec.suspend}=false",
    ("RayCluster", "admitted"): "jsonpath={.spec.suspend}=false",
    ("PyTorchJob", "running"): (
        "jsonpath={.status.conditions[?@.status=='True' && (@.type=='Running' || @.type=='Succeeded')].type}"
    ),
    ("PyTorchJob", "succeeded"): "condition=Succeeded",
    ("RayJob", "running"): "jsonpath={.status[?@=='RUNNING' || @=='SUCCEEDED']}",
    ("RayJob", "succeeded"): "jsonpath={.status.jobStatus}=SUCCEEDED",
    ("RayCluster", "running"): "condition=RayClusterProvisioned",
}


def wait_annotations(kind: str, wait: str) -> dict[str, str]:
    if wait == "none":
        return {"pulumi.com/skipAwait": "true"}
    return {"pulumi.com/waitFor": WAIT_FOR[(kind, wait)]}


def hyperpod_annotations(args: TrainingJobArgs) -> dict[str, str]:
    """HyperPod's auto-resume, for a PyTorchJob on its nodes: after a node fault its job-auto-restart
    controller replaces the node and restarts the job, at most `maxRetries` times (the annotation
    keys and the rule that both come together: sagemaker-hyperpod-cli's command_constants.py and
    validators/job_validator.py)."""
    if args.spec.kind != "PyTorchJob" or not is_sagemaker_type(args.placement.instance_type):
        return {}
    return {
        HYPERPOD_AUTO_RESUME_ANNOTATION: "true",
        HYPERPOD_MAX_RETRY_ANNOTATION: str(args.spec.hyperpod.max_retries),
    }


def worker_restarts(args: TrainingJobArgs) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the Worker's restart fields, the job's runPolicy). Exit codes 1-127 fail the job (a failed
    node check, a bug); 128+ (a signal: node drained, spot reclaimed) restart the pod, which resumes
    from its checkpoint. HyperPod's auto-resume needs restartPolicy OnFailure instead (AWS's "Running
    jobs using the SageMaker HyperPod CLI", and the CLI's validate_hyperpod_related_fields): the
    training operator's runPolicy.backoffLimit then bounds the in-place restarts a bug would loop
    through (it sums the containers' restarts under OnFailure only: kubeflow/training-operator,
    pkg/controller.v1/common/job.go, pastBackoffLimit)."""
    if hyperpod_annotations(args):
        return {"restartPolicy": "OnFailure"}, {"runPolicy": {"backoffLimit": args.spec.hyperpod.max_retries}}
    return {"restartPolicy": "ExitCode"}, {}


def pytorchjob_spec(args: TrainingJobArgs) -> dict[str, Any]:
    spec, p = args.spec, args.placement
    # torchrun through trainer.launch: a replacement node is admitted to the rendezvous, and losing
    # worker-0 (which hosts it) exits retryable, so the operator recreates the pods.
    command = list(spec.command) or ["python", "-m", "trainer.launch", "-m", "trainer.train"]
    container_args = list(spec.args) if spec.command else trainer_args(args)
    restart, run_policy = worker_restarts(args)
    return {
        **run_policy,
        # One process per GPU (one on a CPU node); the operator passes it to torchrun as PET_NPROC_PER_NODE.
        "nprocPerNode": str(p.gpus or 1),
        # c10d rendezvous, and torchrun restarts the workers after a failure (the declarative
        # auto-retry). No `metrics`: the operator would add an HPA that fights Pulumi over replicas.
        "elasticPolicy": {
            "rdzvBackend": "c10d",
            "minReplicas": spec.nodes,
            "maxReplicas": spec.nodes,
            "maxRestarts": 10,
            "rdzvConf": [{"key": "join_timeout", "value": str(RENDEZVOUS_JOIN_TIMEOUT_SECONDS)}],
        },
        "pytorchReplicaSpecs": {
            "Worker": {
                "replicas": spec.nodes,
                **restart,
                "template": pod_template(
                    args, {"name": "pytorch", "command": command, "args": container_args}
                ),
            }
        },
    }


def ray_entrypoint(args: TrainingJobArgs) -> pulumi.Output[str]:
    spec, p = args.spec, args.placement
    if spec.verl is not None:
        experiment = args.tracking.experiment if args.tracking else None
        directory = f"{CHECKPOINT_DIR}/{spec.name}"
        return verl_job.entrypoint(spec.verl, spec.name, spec.nodes, p.gpus, directory, experiment)
    if spec.command:
        parts: list[pulumi.Input[str]] = [*spec.command, *spec.args]
    else:
        workers = spec.nodes * (p.gpus or 1)
        gpu = ["--use-gpu"] if p.gpus else []
        parts = [
            "python",
            "-m",
            "trainer.ray_train",
            "--num-workers",
            str(workers),
            *gpu,
            *trainer_args(args),
        ]
    return pulumi.Output.all(*parts).apply(lambda xs: shlex.join(xs))


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
    spec, p = args.spec, args.placement
    worker = pod_template(args, {"name": "ray-worker"}, {RAY_ROLE_LABEL: RAY_WORKER_ROLE})
    head_vols, head_mounts = volumes(p, args.checkpoints)
    head = {
        "metadata": {"labels": {**PART_OF, JOB_LABEL: spec.name, RAY_ROLE_LABEL: RAY_HEAD_ROLE}},
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
                "replicas": spec.nodes,
                "minReplicas": spec.nodes,
                "maxReplicas": spec.nodes,
                "rayStartParams": {"num-gpus": str(p.gpus)} if p.gpus else {},
                "template": worker,
            }
        ],
    }


def submitter_template(args: TrainingJobArgs) -> dict[str, Any]:
    """The pod that runs `ray job submit` (KubeRay fills in its command), beside the head on the
    system nodes, with the requests the queue's quota counts for it (domain.quota.SUBMITTER)."""
    return {
        "metadata": {"labels": {**PART_OF, JOB_LABEL: args.spec.name, RAY_ROLE_LABEL: RAY_SUBMITTER_ROLE}},
        "spec": {
            "nodeSelector": dict(args.head_selector),
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "ray-job-submitter",
                    "image": args.image,
                    "resources": {
                        "requests": dict(RAY_SUBMITTER),
                        "limits": {"memory": RAY_SUBMITTER["memory"]},
                    },
                }
            ],
        },
    }


def rayjob_spec(args: TrainingJobArgs) -> dict[str, Any]:
    return {
        "entrypoint": ray_entrypoint(args),
        **({"runtimeEnvYAML": verl_job.runtime_env(args.spec.verl)} if args.spec.verl else {}),
        "submissionMode": "K8sJobMode",
        "submitterPodTemplate": submitter_template(args),
        # The cluster goes when the job ends; the RayJob object stays, so the stack does not drift.
        "shutdownAfterJobFinishes": True,
        "backoffLimit": 2,
        "rayClusterSpec": ray_cluster_spec(args),
    }


# Per kind: its API version and what builds its spec.
SPEC_BUILDERS = {
    "PyTorchJob": ("kubeflow.org/v1", pytorchjob_spec),
    "RayJob": ("ray.io/v1", rayjob_spec),
    "RayCluster": ("ray.io/v1", ray_cluster_spec),
}


def watch_commands(kind: str, name: str, namespace: str) -> dict[str, str]:
    watch = f"kubectl -n {namespace} get {kind.lower()} {name} -w"
    if kind == "PyTorchJob":
        logs = f"kubectl -n {namespace} logs -f --prefix -l training.kubeflow.org/job-name={name}"
    elif kind == "RayJob":
        logs = f"kubectl -n {namespace} logs -f job/{name}"
    else:
        logs = f"kubectl -n {namespace} logs -f --prefix -l ray.io/cluster={name}"
    commands = {"watch": watch, "logs": logs}
    if kind == "RayCluster":
        commands["dashboard"] = (
            f"kubectl -n {namespace} port-forward svc/{name}-head-svc {RAY_DASHBOARD_PORT}:{RAY_DASHBOARD_PORT}"
        )
    return commands


class TrainingJob(pulumi.ComponentResource):
    """One PyTorchJob, RayJob or RayCluster (token trainstack:jobs:<kind>)."""

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None):
        spec = args.spec
        super().__init__(f"trainstack:jobs:{spec.kind}", name, None, opts)
        api_version, build = SPEC_BUILDERS[spec.kind]
        deps = [d for d in (args.operator, args.nodes, *args.waits_for) if d is not None]
        timeout = f"{spec.timeout_minutes + args.provision_minutes}m"
        self.resource = k8s.apiextensions.CustomResource(
            name,
            api_version=api_version,
            kind=spec.kind,
            metadata={
                "name": spec.name,
                "namespace": args.namespace,
                "labels": {**PART_OF, NODE_GROUP_LABEL: args.placement.group, QUEUE_LABEL: args.queue},
                "annotations": {**wait_annotations(spec.kind, spec.wait), **hyperpod_annotations(args)},
            },
            spec=build(args),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=deps,
                # A changed spec relaunches the job under the same name; checkpoints live in S3.
                replace_on_changes=["spec"],
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout, delete=DELETE_TIMEOUT),
            ),
        )
        p = args.placement
        self.spec_name = spec.name
        self.summary: JobSummary = {
            "kind": spec.kind,
            "nodeGroup": p.group,
            "nodes": spec.nodes,
            "gpus": spec.nodes * p.gpus,
            "hourlyUsd": None if p.hourly_usd is None else round(spec.nodes * p.hourly_usd, 4),
            "queue": args.queue,
            **watch_commands(spec.kind, spec.name, args.namespace),
        }
        self.register_outputs({"summary": self.summary})
