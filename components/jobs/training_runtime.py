"""The stack's ClusterTrainingRuntime per node group, which its TrainJobs name, and the JobSet Trainer
builds from the two (what Kueue admits and the pods run).

A runtime holds what every TrainJob of a group shares: Trainer's `torch` ML policy, the group's
node selector, tolerations and whole-node resources, the GPU and EFA environment, torchrun's
shutdown timeout under the grace period, /dev/shm, the checkpoint volume, the bucket's datasets,
and the restart rules below. A job names its image, command, flags, environment and node count
(`spec.trainer`) and patches in the rest (`spec.runtimePatches`): its labels, its service account,
its network-topology request, HyperPod's affinity and its directory on a shared checkpoint volume.

Restarts (kubernetes-sigs/jobset v0.12.0, pkg/controllers/failure_policy.go): the Job's pod failure
policy fails the Job at once on the trainer's permanent exits (reason PodFailurePolicy), and the
JobSet's rule turns that into a failed JobSet; any other failure (a drain's 143, a lost node, the
survivors' exit after it, an OOM kill) fails the Job through backoffLimit 0, and JobSet's default
action recreates every Job of the gang, which resumes from the newest complete checkpoint. The
default trainer's launcher bounds the restarts that make no progress (jobs[].maxRecreations, its
exit 5 permanent); `maxRestarts` bounds them all.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.jobs.pods import (
    NODE_LOSS_TOLERATIONS,
    TERMINATION_GRACE_SECONDS,
    WORKDIR,
    Checkpoints,
    launcher_env,
    placement_env,
    volumes,
)
from conventions import PART_OF, cluster_queue_name
from domain.placement import Placement

API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME_KIND = "ClusterTrainingRuntime"
# Trainer's names (kubeflow/trainer v2.3.0 pkg/constants/constants.go): the trainer's replicated
# Job and its container (Node), the label that marks it as the trainer's (LabelTrainJobAncestor,
# AncestorTrainer), and the port its torch plugin gives torchrun (ContainerTrainerPort).
NODE = "node"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
MASTER_PORT = 29500
# The trainer's exits that no restart mends (workload/trainer/resilience.py; a test holds them
# equal): 2, argparse's for a flag it refuses (a config error); PREFLIGHT_EXIT_CODE, its own nodes
# failed their check; CHECKPOINT_UNAVAILABLE_EXIT_CODE, a complete checkpoint no rank can load;
# RECREATIONS_EXIT_CODE, restarted past jobs[].maxRecreations without a newer checkpoint. 1 is not
# among them: a survivor of a lost node exits 1 (torchrun's ChildFailedError), and that must
# restart the gang.
PERMANENT_EXIT_CODES = (2, 3, 4, 5)
# The JobSet's restarts of any cause over a run (JobSet counts them all): a drain or a lost node
# every few hours for weeks stays within it; a `command:` job, whose progress the launcher does not
# see, fails after this many.
MAX_RESTARTS = 100
PERMANENT_RULE = "permanentExit"


def runtime_name(group: str) -> str:
    """The group's runtime (cluster-scoped, so prefixed as its ClusterQueue is)."""
    return cluster_queue_name(group)


@dataclass(frozen=True)
class RuntimeArgs:
    placement: Placement
    checkpoints: Checkpoints  # the volume the group's jobs share (Checkpoints.shared)
    datasets_claim: str | None
    provider: k8s.Provider
    operator: pulumi.Resource | None  # Trainer's chart (its CRDs and webhook); None: the cluster's own
    stop_grace_seconds: int = TERMINATION_GRACE_SECONDS  # the group's (planes/jobs.py group_stop_grace)


def runtime_spec(args: RuntimeArgs) -> dict[str, Any]:
    p = args.placement
    vols, mounts = volumes(p, args.checkpoints, args.datasets_claim)
    pod = {
        **p.pod_placement(),
        # A Job's pod failure policy needs pods that are never restarted in place.
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": args.stop_grace_seconds,
        "containers": [
            {
                "name": NODE,
                "workingDir": WORKDIR,
                "env": [
                    *placement_env(p),
                    *({"name": k, "value": v} for k, v in launcher_env(args.stop_grace_seconds).items()),
                ],
                "resources": p.resources(),
                "volumeMounts": mounts,
            }
        ],
        "volumes": vols,
    }
    pod["tolerations"] = [*pod.get("tolerations", []), *NODE_LOSS_TOLERATIONS]
    job = {
        "completionMode": "Indexed",  # the torch plugin's PET_NODE_RANK is the pod's completion index
        "backoffLimit": 0,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": NODE,
                        "operator": "In",
                        "values": list(PERMANENT_EXIT_CODES),
                    },
                }
            ]
        },
        "template": {"spec": pod},
    }
    return {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "failurePolicy": {
                    "maxRestarts": MAX_RESTARTS,
                    "rules": [
                        {
                            "name": PERMANENT_RULE,
                            "action": "FailJobSet",
                            "onJobFailureReasons": ["PodFailurePolicy"],
                        }
                    ],
                },
                "replicatedJobs": [
                    {
                        "name": NODE,
                        "replicas": 1,
                        "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}}, "spec": job},
                    }
                ],
            }
        },
    }


class TrainingRuntime(pulumi.ComponentResource):
    """One node group's ClusterTrainingRuntime (token trainstack:jobs:TrainingRuntime)."""

    def __init__(self, name: str, args: RuntimeArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:jobs:TrainingRuntime", name, None, opts)
        self.name = runtime_name(args.placement.group)
        self.resource = k8s.apiextensions.CustomResource(
            name,
            api_version=API_VERSION,
            kind=RUNTIME_KIND,
            metadata={
                "name": self.name,
                "labels": {**PART_OF, "trainer.kubeflow.org/framework": "torch"},
            },
            spec=runtime_spec(args),
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=[args.operator] if args.operator is not None else [],
            ),
        )
        self.register_outputs({"name": self.name})


# --- the JobSet Trainer builds, as Kueue reads it --------------------------------------------------

# The list fields Kubernetes' strategic merge patch merges by a key (their Go types' patchMergeKey:
# JobSetSpec.ReplicatedJobs, PodSpec's containers and volumes, Container's env and volumeMounts);
# every other list is replaced whole, tolerations included.
MERGE_KEYS = {
    "replicatedJobs": "name",
    "containers": "name",
    "initContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "env": "name",
}


def strategic_merge(base: Any, patch: Any, field: str | None = None) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = strategic_merge(base[key], value, key) if key in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and field in MERGE_KEYS:
        key, merged = MERGE_KEYS[field], list(base)
        for item in patch:
            at = next((i for i, b in enumerate(merged) if b.get(key) == item.get(key)), None)
            if at is None:
                merged.append(copy.deepcopy(item))
            else:
                merged[at] = strategic_merge(merged[at], item)
        return merged
    return copy.deepcopy(patch)


def _upsert_env(env: list[dict], more: list[dict]) -> list[dict]:
    """Trainer's apply.UpsertEnvVars: a name already there is replaced in place, others appended."""
    found = list(env)
    for var in more:
        at = next((i for i, e in enumerate(found) if e["name"] == var["name"]), None)
        if at is None:
            found.append(var)
        else:
            found[at] = var
    return found


def torch_env(job: str, nodes: int, procs: int | str) -> list[dict]:
    """What Trainer's torch plugin gives the trainer's container (pkg/runtime/framework/plugins/
    torch/torch.go, EnforceMLPolicy): torchrun's node count, processes per node, the node's rank
    (its pod's completion index) and the static rendezvous at node 0's first pod, through JobSet's
    headless service named after the job."""
    return [
        {"name": "PET_NNODES", "value": str(nodes)},
        {"name": "PET_NPROC_PER_NODE", "value": str(procs)},
        {
            "name": "PET_NODE_RANK",
            "valueFrom": {
                "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
            },
        },
        {"name": "PET_MASTER_ADDR", "value": f"{job}-{NODE}-0-0.{job}"},
        {"name": "PET_MASTER_PORT", "value": str(MASTER_PORT)},
    ]


def job_set_spec(train_job: Mapping[str, Any], runtime: Mapping[str, Any]) -> dict[str, Any]:
    """The spec of the JobSet Trainer creates for `train_job` from `runtime` (Kueue builds the same
    to make the job's PodSets: kueue v0.19.2 pkg/controller/jobs/trainjob, getChildJobSet): the
    runtime's template with each runtime patch merged in order (Trainer's mergeRuntimePatches), then
    the trainer's image, command, args and env on its container, its node count as the Job's
    parallelism and completions, and the torch plugin's environment."""
    spec = copy.deepcopy(runtime["spec"]["template"]["spec"])
    for patch in train_job["spec"].get("runtimePatches") or []:
        patch_spec = ((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec")
        if patch_spec:
            spec = strategic_merge(spec, patch_spec)
    trainer = train_job["spec"].get("trainer") or {}
    name = train_job["metadata"]["name"]
    nodes = int(trainer.get("numNodes") or (runtime["spec"].get("mlPolicy") or {}).get("numNodes") or 1)
    for rjob in spec["replicatedJobs"]:
        if (rjob["template"].get("metadata") or {}).get("labels", {}).get(ANCESTOR_LABEL) != "trainer":
            continue
        job = rjob["template"]["spec"]
        job["parallelism"] = job["completions"] = nodes
        for container in job["template"]["spec"]["containers"]:
            if container["name"] != NODE:
                continue
            container.update({k: trainer[k] for k in ("image", "command", "args") if trainer.get(k)})
            env = _upsert_env(container.get("env") or [], trainer.get("env") or [])
            container["env"] = _upsert_env(env, torch_env(name, nodes, trainer.get("numProcPerNode", "auto")))
            container["ports"] = [{"containerPort": MASTER_PORT}]
    return spec


def job_set_pod_sets(spec: Mapping[str, Any]) -> list[tuple[str, dict[str, Any], int]]:
    """Kueue's PodSets of a JobSet (pkg/controller/jobs/jobset, PodSets): one per replicated Job,
    named after it, of its replicas times its pods."""
    found = []
    for rjob in spec["replicatedJobs"]:
        job = rjob["template"]["spec"]
        pods = min(int(job.get("parallelism", 1)), int(job.get("completions", job.get("parallelism", 1))))
        found.append((rjob["name"], job["template"], int(rjob.get("replicas", 1)) * pods))
    return found
