"""Reading a job manifest as the plan renders it: its worker pod, container and environment. A
TrainJob's pods come from its runtime as well: pass what the plan sends
(offline.scheduling.referenced_objects)."""

from __future__ import annotations

from typing import Any

from components.jobs.kind import NO_OBJECTS, Objects
from components.jobs.kinds import KINDS


def worker_container(m: dict, objects: Objects = NO_OBJECTS) -> dict:
    return worker_pod(m, objects)["containers"][0]


def worker_pod(m: dict, objects: Objects = NO_OBJECTS) -> dict:
    if m["kind"] == "PyTorchJob":
        return m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    if m["kind"] == "TrainJob":
        ((_, template, _),) = KINDS["TrainJob"].pod_sets(m, objects)
        return template["spec"]
    cluster = m["spec"]["rayClusterSpec"] if m["kind"] == "RayJob" else m["spec"]
    return cluster["workerGroupSpecs"][0]["template"]["spec"]


def env_of(m: dict, objects: Objects = NO_OBJECTS) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in worker_container(m, objects)["env"]}
