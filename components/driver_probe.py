"""Before a job on a GPU group is registered: its image's CUDA against the NVIDIA driver of a node of
its group, on every kind of cluster (the stack's own node groups, an existing cluster's, HyperPod's).
A node's driver cannot be read before the node exists (a group that scales from zero has none at
plan time) and GPU feature discovery, which labels it, is off in the device-plugin charts and needs
Node Feature Discovery beside it; so a Job runs the probe (workload/trainer/driver_probe.py, standard
library only, given to `python3 -c` whole, so it needs nothing of the trainer in the image) in the
job's own image on a node of the group. It reads the loaded kernel module's version from
`/sys/module` (the node's kernel, as every container sees it) and the image's own CUDA release
(`CUDA_VERSION`). It asks for no GPU (the group's GPUs may all be training) and runs with
NVIDIA_VISIBLE_DEVICES=void, so the NVIDIA runtime starts it like any container even where the
driver is too old for the image.

pulumi-kubernetes waits for a Job to complete and fails the `up` with its container's termination
message where it fails (the provider's job await and pod checker), so the job that depends on it is
never registered on a node that cannot start it. No Kueue queue label: Kueue leaves a batch Job
without one alone (components/datasets.py says why), and the probe takes no quota. A changed image
replaces the probe (a Job's template is immutable) and so probes again before the relaunch; an
unchanged one is not probed again. Nodes that join later are not probed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from conventions import PART_OF
from domain.drivers import least_driver_table
from domain.placement import Placement

PROBE_LABEL = "trainstack.dev/driver-probe"
# The kernel is the node's: a container's sysfs shows its loaded modules, no host path needed (so a
# namespace under Pod Security "baseline", which refuses hostPath volumes, takes the probe too).
MODULE_DIR = "/sys/module"
# A container the NVIDIA runtime starts as runc would: no GPU, no NVIDIA_REQUIRE_CUDA check.
NO_GPU_ENV = {"NVIDIA_VISIBLE_DEVICES": "void"}
# The probe's source, run as it is in the job's image: any image with python3, the trainer's or not.
PROBE_SOURCE = (Path(__file__).resolve().parents[1] / "workload" / "trainer" / "driver_probe.py").read_text()
PROBE_COMMAND = ["/bin/sh", "-c", 'exec python3 -c "$DRIVER_PROBE" "$@"', "driver-probe"]
RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}}


@dataclass(frozen=True)
class DriverProbeArgs:
    job: str  # the job it clears
    name: str  # the probe Job's name
    placement: Placement  # the job's group
    image: pulumi.Input[str]  # the job's image: its CUDA release is what the node's driver must serve
    namespace: pulumi.Input[str]
    provider: k8s.Provider
    timeout_minutes: int  # a node of the group to come up, and the image to be pulled
    fix: str  # where the group's AMI is set, as a sentence names it
    waits_for: list[pulumi.Resource]


def probe_args(args: DriverProbeArgs) -> list[str]:
    return [
        "--where",
        f"job {args.job} on gpuNodeGroups {args.placement.group}",
        "--least-driver",
        json.dumps(least_driver_table(), sort_keys=True),
        "--fix",
        args.fix,
        "--module-dir",
        MODULE_DIR,
    ]


class DriverProbe(pulumi.ComponentResource):
    def __init__(self, name: str, args: DriverProbeArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:jobs:DriverProbe", name, None, opts)
        labels = {**PART_OF, PROBE_LABEL: args.job}
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={"name": args.name, "namespace": args.namespace, "labels": labels},
            spec={
                "backoffLimit": 0,  # the driver is the driver: one answer
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "restartPolicy": "Never",
                        "automountServiceAccountToken": False,
                        **args.placement.pod_placement(),
                        "containers": [
                            {
                                "name": "probe",
                                "image": args.image,
                                "command": PROBE_COMMAND,
                                "args": probe_args(args),
                                # A shell that finds no python3 says so in the message the `up` shows.
                                "terminationMessagePolicy": "FallbackToLogsOnError",
                                "env": [
                                    {"name": "DRIVER_PROBE", "value": PROBE_SOURCE},
                                    *({"name": k, "value": v} for k, v in NO_GPU_ENV.items()),
                                    {
                                        "name": "NODE_NAME",
                                        "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                                    },
                                ],
                                "resources": RESOURCES,
                            }
                        ],
                    },
                },
            },
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=args.provider,
                depends_on=args.waits_for,
                custom_timeouts=pulumi.CustomTimeouts(create=f"{args.timeout_minutes}m"),
            ),
        )
        self.register_outputs({"job": args.name})
