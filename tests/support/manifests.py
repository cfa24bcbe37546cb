"""Reading a job manifest as the plan renders it: its worker pod, container and environment."""

from __future__ import annotations

from typing import Any


def worker_container(m: dict) -> dict:
    return worker_pod(m)["containers"][0]


def worker_pod(m: dict) -> dict:
    if m["kind"] == "PyTorchJob":
        return m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    cluster = m["spec"]["rayClusterSpec"] if m["kind"] == "RayJob" else m["spec"]
    return cluster["workerGroupSpecs"][0]["template"]["spec"]


def env_of(m: dict) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in worker_container(m)["env"]}
