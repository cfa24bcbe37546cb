"""A training job as a stack resource, of any kind the wing has (kinds.py), queued through Kueue.

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

import pulumi
import pulumi_kubernetes as k8s

from components.jobs.kinds import KINDS
from components.jobs.pods import TrainingJobArgs, delete_timeout
from conventions import NODE_GROUP_LABEL, PART_OF, QUEUE_LABEL
from stack_outputs import JobSummary

# A job's spec is the stack's: a change replaces the job (replace_on_changes). What updates a job in
# place is its metadata (a label or a wait annotation, an upgrade's stack label), and the provider
# applies the whole object then. Kueue wrote into the spec at admission (RunWithPodSetsInfo: the pod
# templates' node selector, tolerations, labels; a RayJob's workerGroupSpecs, a list applied whole),
# so that apply meets Kueue's field manager and fails on the conflict (seen on the tier: "conflict
# with "kueue" using ray.io/v1: .spec.rayClusterSpec.workerGroupSpecs"). Forced, it re-asserts the
# stack's own, unchanged spec. Kueue still holds the admitted job equivalent to its Workload: it
# compares pod counts, containers and init containers, tolerations not once admitted (kueue v0.19.2
# pkg/controller/jobframework/reconciler.go EquivalentToWorkload, pkg/util/equality/podset.go),
# none of which its admission wrote; the running pods are the operator's and stay (the tier's
# upgrade scenario holds their uids).
ADMISSION_FIELDS_ARE_THE_STACKS = {"pulumi.com/patchForce": "true"}


def wait_annotations(kind: str, wait: str) -> dict[str, str]:
    """What `pulumi up` waits for (pulumi-kubernetes `pulumi.com/waitFor`), per the kind's modes.
    "admitted": Kueue resumed the job (its suspend field turns false once the whole job is admitted
    and its nodes exist)."""
    if wait == "none":
        return {"pulumi.com/skipAwait": "true"}
    return {"pulumi.com/waitFor": KINDS[kind].wait_for[wait]}


class TrainingJob(pulumi.ComponentResource):
    """One job of any kind (token trainstack:jobs:<kind>)."""

    def __init__(self, name: str, args: TrainingJobArgs, opts: pulumi.ResourceOptions | None = None):
        job = args.job
        kind = KINDS[job.kind]
        super().__init__(f"trainstack:jobs:{job.kind}", name, None, opts)
        deps = [d for d in (args.operator, args.nodes, *args.waits_for, *kind.shared(args)) if d is not None]
        timeout = f"{job.timeout_minutes + args.provision_minutes}m"
        self.resource = k8s.apiextensions.CustomResource(
            name,
            api_version=kind.api_version,
            kind=job.kind,
            metadata={
                "name": job.name,
                "namespace": args.namespace,
                "labels": {**PART_OF, NODE_GROUP_LABEL: args.placement.group, QUEUE_LABEL: args.queue},
                "annotations": {
                    **wait_annotations(job.kind, job.wait),
                    **kind.annotations(args),
                    **ADMISSION_FIELDS_ARE_THE_STACKS,
                },
            },
            spec=kind.spec(args),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=deps,
                # A changed spec relaunches the job under the same name; checkpoints live in S3.
                replace_on_changes=["spec"],
                delete_before_replace=True,
                custom_timeouts=pulumi.CustomTimeouts(
                    create=timeout, update=timeout, delete=delete_timeout(args.stop_grace_seconds)
                ),
            ),
        )
        p = args.placement
        self.spec_name = job.name
        self.summary: JobSummary = {
            "kind": job.kind,
            "nodeGroup": p.group,
            "nodes": job.nodes,
            "gpus": job.nodes * p.gpus,
            "hourlyUsd": None if p.hourly_usd is None else round(job.nodes * p.hourly_usd, 4),
            "queue": args.queue,
            "retries": kind.retries(args),
            **kind.watch_commands(job.name, args.namespace),
        }
        if args.tracking is not None:
            self.summary["experiment"] = args.tracking.experiment
        if args.modeled_tokens_per_s:
            self.summary["modeledTokensPerS"] = {
                str(n): round(v) for n, v in args.modeled_tokens_per_s.items()
            }
        self.register_outputs({"summary": self.summary})
