"""RayJob (KubeRay): a Ray cluster for one run, its entrypoint submitted by a submitter pod, the
cluster gone when the run ends; the default trainer's Ray Train loop, a command, or VERL."""

from __future__ import annotations

import shlex
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pulumi

from components.jobs import verl as verl_job
from components.jobs.kind import NO_OBJECTS, JobKind, Objects
from components.jobs.pods import CHECKPOINT_DIR, TrainingJobArgs, trainer_args
from components.jobs.ray import ray_allows, ray_cluster_spec, ray_pod_sets
from components.network_policy import Allow
from conventions import JOB_LABEL, PART_OF, RAY_ROLE_LABEL, RAY_SUBMITTER_ROLE
from domain.placement import RAY_DRIVER_CPUS, RAY_SUBMITTER

if TYPE_CHECKING:
    from components.operators import ClusterOperators


# Kueue's (and KubeRay's) submitter pod when a RayJob names none (rayjob_controller.go).
DEFAULT_SUBMITTER = {
    "spec": {"containers": [{"resources": {"requests": {"cpu": "500m", "memory": "200Mi"}}}]}
}


def ray_entrypoint(args: TrainingJobArgs) -> pulumi.Output[str]:
    job, p = args.job, args.placement
    if job.verl is not None:
        experiment = args.tracking.experiment if args.tracking else None
        directory = f"{CHECKPOINT_DIR}/{job.name}"
        return verl_job.entrypoint(job.verl, job.name, job.nodes, p.gpus, directory, experiment)
    if job.command:
        parts: list[pulumi.Input[str]] = [*job.command, *job.args]
    else:
        workers = job.nodes * (p.gpus or 1)
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


def submitter_template(args: TrainingJobArgs) -> dict[str, Any]:
    """The pod that runs `ray job submit` (KubeRay fills in its command), beside the head on the
    system nodes, with the requests the queue's quota counts for it (domain.job_kinds, the RayJob's system pods)."""
    return {
        "metadata": {"labels": {**PART_OF, JOB_LABEL: args.job.name, RAY_ROLE_LABEL: RAY_SUBMITTER_ROLE}},
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


class RayJob(JobKind):
    name = "RayJob"
    api_version = "ray.io/v1"
    # No conditions, only status.jobStatus.
    wait_for = MappingProxyType(
        {
            # No `admitted` (domain/job_kinds.py): a resumed RayJob's suspend false is not written.
            "running": "jsonpath={.status[?@=='RUNNING' || @=='SUCCEEDED']}",
            "succeeded": "jsonpath={.status.jobStatus}=SUCCEEDED",
        }
    )

    def spec(self, args: TrainingJobArgs) -> dict[str, Any]:
        return {
            "entrypoint": ray_entrypoint(args),
            # The head starts with num-cpus 0 and sits on the system nodes: an entrypoint asking for
            # nothing runs there (Ray's job FAQ), asking for a CPU it runs on a worker, whose node
            # role pods cannot reach either (KubeRay passes it as `ray job submit --entrypoint-num-cpus`).
            "entrypointNumCpus": RAY_DRIVER_CPUS,
            **({"runtimeEnvYAML": verl_job.runtime_env(args.job.verl)} if args.job.verl else {}),
            "submissionMode": "K8sJobMode",
            "submitterPodTemplate": submitter_template(args),
            # The cluster goes when the job ends; the RayJob object stays, so the stack does not drift.
            "shutdownAfterJobFinishes": True,
            # Whole attempts, each on a new cluster: KubeRay 1.7.0 retries a failed RayJob while
            # status.failed < backoffLimit + 1 (rayjob_controller.go, checkBackoffLimitAndUpdateStatusIfNeeded).
            "backoffLimit": args.job.max_recreations,
            "rayClusterSpec": ray_cluster_spec(args),
        }

    def pod_sets(
        self, manifest: dict[str, Any], objects: Objects = NO_OBJECTS
    ) -> list[tuple[str, dict[str, Any], int]]:
        """The Ray cluster's, and in K8sJobMode (KubeRay's default) a third, its submitter Job
        (kueue's rayjob integration)."""
        spec = manifest["spec"]
        sets = ray_pod_sets(spec["rayClusterSpec"])
        if spec.get("submissionMode", "K8sJobMode") == "K8sJobMode":
            sets.append(("submitter", spec.get("submitterPodTemplate") or DEFAULT_SUBMITTER, 1))
        return sets

    def allows(self, job: str) -> tuple[Allow, ...]:
        """The Ray cluster's flows, and its head's dashboard from the submitter (`ray job submit`)."""
        submitter = {"podSelector": {"matchLabels": {JOB_LABEL: job, RAY_ROLE_LABEL: RAY_SUBMITTER_ROLE}}}
        return ray_allows(job, submitter)

    def operator(self, operators: ClusterOperators) -> pulumi.Resource | None:
        return operators.kuberay

    def retries(self, args: TrainingJobArgs) -> str:
        job, n = args.job, args.job.max_recreations
        within = (
            "" if job.verl or job.command else "; within one, Ray Train restarts its workers up to 3 times"
        )
        return (
            f"at most {n + 1} attempt(s), each on a new Ray cluster (backoffLimit {n}: every failed attempt "
            f"counts, progress or not){within}"
        )

    def logs_command(self, name: str, namespace: str) -> str:
        return f"kubectl -n {namespace} logs -f job/{name}"


RAYJOB = RayJob()
