"""TrainJob (Kubeflow Trainer v2, on JobSet): torchrun on every node through Trainer's torch plugin,
on the stack's runtime of the job's node group (training_runtime.py), restarted whole by JobSet
after a drain or a lost node and failed at once on the trainer's permanent exits.

What it gives up against a PyTorchJob: a static rendezvous (Trainer has no elastic torchrun yet,
torch.go's EnforceMLPolicy), so a lost node restarts the whole gang rather than admitting a
replacement into the survivors' rendezvous, and on HyperPod nodes HyperPod's auto-resume, whose
controller watches PyTorchJobs only."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pulumi

from components.jobs import hyperpod
from components.jobs.kind import NO_OBJECTS, JobKind, Objects
from components.jobs.pods import (
    CHECKPOINT_DIR,
    TrainingJobArgs,
    gang_allows,
    job_env,
    recreation_env,
    trainer_args,
)
from components.jobs.training_runtime import (
    API_VERSION,
    MAX_RESTARTS,
    NODE,
    RUNTIME_KIND,
    RuntimeArgs,
    TrainingRuntime,
    job_set_pod_sets,
    job_set_spec,
    runtime_name,
)
from components.network_policy import Allow
from conventions import JOB_LABEL, PART_OF

if TYPE_CHECKING:
    from components.operators import ClusterOperators

# Who writes the stack's runtime patch (a domain-prefixed path, as Trainer's webhook requires;
# Kueue writes its own, kueue.x-k8s.io/manager, at admission).
PATCH_MANAGER = "trainstack.dev/jobs"
# JobSet's pods carry their JobSet's name (Kueue's TrainJob PodLabelSelector).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def runtime_patch(args: TrainingJobArgs) -> dict[str, Any]:
    """The job's own part of its pods: labels, its network-topology request, its service account,
    HyperPod's affinity and its directory on the group's checkpoint volume."""
    metadata: dict[str, Any] = {"labels": {**PART_OF, JOB_LABEL: args.job.name}}
    if args.topology:
        metadata["annotations"] = dict(args.topology)
    pod: dict[str, Any] = {"serviceAccountName": args.service_account}
    if hyperpod.on_hyperpod(args.placement):
        pod["affinity"] = hyperpod.affinity(args.job.hyperpod)
    _, sub_path = args.checkpoints.shared()
    if sub_path:
        mount = {"name": "checkpoints", "mountPath": CHECKPOINT_DIR, "subPath": sub_path}
        pod["containers"] = [{"name": NODE, "volumeMounts": [mount]}]
    job = {"name": NODE, "template": {"spec": {"template": {"metadata": metadata, "spec": pod}}}}
    return {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [job]}}},
    }


class TrainJob(JobKind):
    name = "TrainJob"
    api_version = API_VERSION
    # Kueue resumes it once admitted; Trainer reports its child Jobs' pods (jobsStatus: `ready`
    # once every pod of the Job is ready, `succeeded` after) and Complete at the end.
    wait_for = MappingProxyType(
        {
            "admitted": "jsonpath={.spec.suspend}=false",
            "running": (
                f"jsonpath={{.status.jobsStatus[?@.name=='{NODE}' && (@.ready==1 || @.succeeded==1)].name}}"
            ),
            "succeeded": "condition=Complete",
        }
    )

    def shared(self, args: TrainingJobArgs) -> list[pulumi.Resource]:
        """The group's runtime, made by its first TrainJob."""
        name = runtime_name(args.placement.group)
        if name not in args.shared:
            volume, _ = args.checkpoints.shared()
            runtime_args = RuntimeArgs(
                args.placement,
                volume,
                args.datasets_claim,
                args.provider,
                args.operator,
                args.stop_grace_seconds,  # the group's, the same for each of its jobs
            )
            args.shared[name] = TrainingRuntime(f"runtime-{args.placement.group}", runtime_args)
        return [args.shared[name]]

    def spec(self, args: TrainingJobArgs) -> dict[str, Any]:
        job, p = args.job, args.placement
        command = list(job.command) or ["python", "-m", "trainer.launch", "-m", "trainer.train"]
        # The runtime holds the group's environment; the job's comes after it.
        env = job_env(args, {} if job.command else recreation_env(args))
        container_args = list(job.args) if job.command else trainer_args(args)
        return {
            "runtimeRef": {
                "name": runtime_name(p.group),
                "apiGroup": API_VERSION.rpartition("/")[0],
                "kind": RUNTIME_KIND,
            },
            "trainer": {
                "image": args.image,
                "command": command,
                **({"args": container_args} if container_args else {}),
                **({"env": env} if env else {}),
                "numNodes": job.nodes,
                # One process per GPU (one on a CPU node, where Trainer's `auto` would count CPUs).
                "numProcPerNode": p.gpus or 1,
            },
            "runtimePatches": [runtime_patch(args)],
        }

    def pod_sets(
        self, manifest: dict[str, Any], objects: Objects = NO_OBJECTS
    ) -> list[tuple[str, dict[str, Any], int]]:
        """Its JobSet's (kueue's trainjob integration builds the JobSet from the job and its runtime)."""
        ref = manifest["spec"]["runtimeRef"]["name"]
        runtime = objects.get((RUNTIME_KIND, ref))
        if runtime is None:
            raise ValueError(
                f"{manifest['metadata']['name']}: its {RUNTIME_KIND} {ref} is not among the stack's"
            )
        return job_set_pod_sets(job_set_spec(manifest, runtime))

    def allows(self, job: str) -> tuple[Allow, ...]:
        return gang_allows(job)

    def operator(self, operators: ClusterOperators) -> pulumi.Resource | None:
        return operators.trainer

    def retries(self, args: TrainingJobArgs) -> str:
        job = args.job
        gang = (
            f"JobSet restarts the whole gang after a drain or a lost node, at most {MAX_RESTARTS} times "
            "(its maxRestarts); exits 2-5 fail it at once"
        )
        if not job.command:
            gang = (
                f"fails once its pods have been recreated {job.max_recreations} time(s) without a newer "
                f"checkpoint (jobs[].maxRecreations; its launcher exits 5); {gang}"
            )
        if hyperpod.on_hyperpod(args.placement):
            gang += "; HyperPod's auto-resume does not watch TrainJobs"
        return gang

    def logs_command(self, name: str, namespace: str) -> str:
        return f"kubectl -n {namespace} logs -f --prefix -l {JOBSET_NAME_LABEL}={name}"


TRAINJOB = TrainJob()
