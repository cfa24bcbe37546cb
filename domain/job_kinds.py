"""What each kind of job is, as the layers below the components need it: the operator that runs
it, its name's limit, the pods it runs beside its workers (Kueue counts them on the system flavor),
the `wait` modes it can reach, whether it is a Ray cluster, and whether HyperPod's auto-resume
watches it. The list of kinds is `stack_outputs.JobKind`; each kind's manifest is the jobs wing's
(components/jobs/<kind>.py). Adding a kind is its name there, an entry here, and a module in the
wing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from domain.placement import RAY_HEAD, RAY_SUBMITTER
from stack_outputs import JobKind


@dataclass(frozen=True)
class KindFacts:
    name: JobKind
    operator: str  # the operator that runs it, by its config key (operators.<key>)
    max_name: int  # characters: KubeRay appends suffixes to a Ray job's name for its pods and services
    waits: tuple[str, ...]  # what `pulumi up` can wait for (jobs[].wait), besides none
    # Requests of its pods beside the workers, on the system nodes: a Ray head, a RayJob's
    # submitter (kueue's rayjob integration: head, worker groups, submitter).
    system_pods: tuple[Mapping[str, str], ...] = ()
    ray: bool = False  # a Ray cluster: KubeRay sets its token authentication on every pod
    # HyperPod's job-auto-restart controller watches pytorchjobs only (its ClusterRole in the
    # sagemaker-hyperpod-dependencies chart, job-auto-restart/templates/job-auto-restart-rbac.yaml).
    hyperpod_auto_resume: bool = False
    bare: bool = False  # runs nothing of its own (a RayCluster): no default trainer to size


KINDS: dict[str, KindFacts] = {
    k.name: k
    for k in (
        KindFacts(
            "PyTorchJob",
            "trainingOperator",
            63,
            ("admitted", "running", "succeeded"),
            hyperpod_auto_resume=True,
        ),
        KindFacts(
            "RayJob",
            "kuberay",
            47,
            # Not `admitted`: KubeRay writes a resumed RayJob's `suspend: false` as no field at all
            # (a plain bool, omitempty: ray-operator apis/ray/v1/rayjob_types.go), so nothing a
            # watch can match marks its admission; `trainstack status` shows its Workload instead.
            ("running", "succeeded"),
            (RAY_HEAD, RAY_SUBMITTER),
            ray=True,
        ),
        # A RayCluster runs until deleted and never succeeds.
        KindFacts("RayCluster", "kuberay", 47, ("admitted", "running"), (RAY_HEAD,), ray=True, bare=True),
        # JobSet names a pod `<job>-node-0-<index>-<5 characters>`, within 63 for up to 100 nodes
        # (jobset v0.12.0 pkg/webhooks/jobset_webhook.go, podNameTooLongErrorMsg).
        KindFacts("TrainJob", "trainer", 47, ("admitted", "running", "succeeded")),
    )
}
RAY_KINDS = tuple(k for k, facts in KINDS.items() if facts.ray)
