"""PyTorchJob (Kubeflow training operator): torchrun on every node, a c10d rendezvous that admits a
replacement node, and on HyperPod nodes HyperPod's auto-resume."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pulumi

from components.jobs import hyperpod
from components.jobs.kind import NO_OBJECTS, JobKind, Objects
from components.jobs.pods import (
    RENDEZVOUS_JOIN_TIMEOUT_SECONDS,
    TrainingJobArgs,
    gang_allows,
    launcher_env,
    pod_template,
    recreation_env,
    trainer_args,
)
from components.network_policy import Allow

if TYPE_CHECKING:
    from components.operators import ClusterOperators


def worker_restarts(args: TrainingJobArgs) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the Worker's restart fields, the job's runPolicy). Exit codes 1-127 fail the job (a failed
    node check, a bug); 128+ (a signal: node drained, spot reclaimed) restart the pod, which resumes
    from its checkpoint. HyperPod's auto-resume needs restartPolicy OnFailure instead (AWS's "Running
    jobs using the SageMaker HyperPod CLI", and the CLI's validate_hyperpod_related_fields): the
    training operator's runPolicy.backoffLimit then bounds the in-place restarts a bug would loop
    through (it sums the containers' restarts under OnFailure only: kubeflow/training-operator,
    pkg/controller.v1/common/job.go, pastBackoffLimit)."""
    if hyperpod.on_hyperpod(args.placement):
        return {"restartPolicy": "OnFailure"}, {"runPolicy": {"backoffLimit": args.job.hyperpod.max_retries}}
    return {"restartPolicy": "ExitCode"}, {}


class PyTorchJob(JobKind):
    name = "PyTorchJob"
    api_version = "kubeflow.org/v1"
    # Its Running condition flips to False when it finishes, so "running" also accepts Succeeded.
    wait_for = MappingProxyType(
        {
            "admitted": "jsonpath={.spec.runPolicy.suspend}=false",
            "running": (
                "jsonpath={.status.conditions[?@.status=='True' && (@.type=='Running' || @.type=='Succeeded')].type}"
            ),
            "succeeded": "condition=Succeeded",
        }
    )

    def spec(self, args: TrainingJobArgs) -> dict[str, Any]:
        job, p = args.job, args.placement
        # torchrun through trainer.launch: a replacement node is admitted to the rendezvous, and losing
        # worker-0 (which hosts it) exits retryable, so the operator recreates the pods.
        command = list(job.command) or ["python", "-m", "trainer.launch", "-m", "trainer.train"]
        container_args = list(job.args) if job.command else trainer_args(args)
        restart, run_policy = worker_restarts(args)
        launcher = launcher_env(args.stop_grace_seconds)
        return {
            **run_policy,
            # One process per GPU (one on a CPU node); the operator passes it to torchrun as PET_NPROC_PER_NODE.
            "nprocPerNode": str(p.gpus or 1),
            # c10d rendezvous, and torchrun restarts the workers after a failure (the declarative
            # auto-retry). No `metrics`: the operator would add an HPA that fights Pulumi over replicas.
            "elasticPolicy": {
                "rdzvBackend": "c10d",
                "minReplicas": job.nodes,
                "maxReplicas": job.nodes,
                "maxRestarts": 10,
                "rdzvConf": [{"key": "join_timeout", "value": str(RENDEZVOUS_JOIN_TIMEOUT_SECONDS)}],
            },
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": job.nodes,
                    **restart,
                    "template": pod_template(
                        args,
                        {"name": "pytorch", "command": command, "args": container_args},
                        kind_env=launcher if job.command else {**launcher, **recreation_env(args)},
                    ),
                }
            },
        }

    def annotations(self, args: TrainingJobArgs) -> dict[str, str]:
        """HyperPod's auto-resume on its nodes (its controller watches PyTorchJobs only)."""
        if not hyperpod.on_hyperpod(args.placement):
            return {}
        return hyperpod.auto_resume_annotations(args.job.hyperpod)

    def pod_sets(
        self, manifest: dict[str, Any], objects: Objects = NO_OBJECTS
    ) -> list[tuple[str, dict[str, Any], int]]:
        """One PodSet per replica type (kueue's pkg/controller/jobs/kubeflow/kubeflowjob)."""
        replicas = manifest["spec"]["pytorchReplicaSpecs"].items()
        return [(k.lower(), r["template"], r.get("replicas", 1)) for k, r in replicas]

    def allows(self, job: str) -> tuple[Allow, ...]:
        return gang_allows(job)

    def operator(self, operators: ClusterOperators) -> pulumi.Resource | None:
        return operators.training_operator

    def retries(self, args: TrainingJobArgs) -> str:
        job = args.job
        if hyperpod.on_hyperpod(args.placement):
            return (
                f"fails once its containers have restarted {job.hyperpod.max_retries} times "
                "(runPolicy.backoffLimit under OnFailure); HyperPod resumes it as often after a node fault"
            )
        if job.command:
            return (
                "none: a command's pods are recreated after every retryable exit (128+) under ExitCode, "
                "where the operator's backoffLimit counts nothing"
            )
        return (
            f"fails once a pod has been recreated {job.max_recreations} time(s) without a newer checkpoint "
            "(jobs[].maxRecreations; its launcher exits 5); the operator itself bounds nothing under ExitCode"
        )

    def logs_command(self, name: str, namespace: str) -> str:
        return f"kubectl -n {namespace} logs -f --prefix -l training.kubeflow.org/job-name={name}"


PYTORCHJOB = PyTorchJob()
