"""One cluster for the tests of tests/cluster/: the control plane, kwok and the device-plugin
stand-in, started once per session (pytest-xdist keeps those tests on one worker: the `cluster`
group). Nodes are added by the scenarios that need them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes import config as kube_config

from offline.nodes import Node
from support.cluster.binaries import BIN
from support.cluster.control_plane import ControlPlane
from support.cluster.kwok import DevicePlugins, create_nodes, start_kwok
from support.cluster.objects import Objects


class Cluster:
    def __init__(self, directory: Path):
        self.dir = directory
        self.control_plane = ControlPlane(directory)
        self.kubeconfig = self.control_plane.kubeconfig
        self.processes = self.control_plane.processes
        self.bin_dir = BIN

    def start(self) -> None:
        self.control_plane.start()
        self.api = kube_config.new_client_from_config(str(self.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.objects = Objects(self.api)
        start_kwok(self.processes, self.kubeconfig)
        self.processes.wait_until(
            "the default ServiceAccount",
            lambda: self.core.read_namespaced_service_account("default", "default") is not None,
            120,
            "kube-controller-manager",
        )
        self.device_plugins = DevicePlugins(self.api)
        self.device_plugins.start()

    def stop(self) -> None:
        if hasattr(self, "device_plugins"):
            self.device_plugins.stop()
        self.control_plane.stop()

    def add_nodes(self, node: Node, count: int | None = None) -> list[str]:
        """`count` (default: the group's most) kwok nodes shaped like `node`, once Ready."""
        names = create_nodes(self.core, node, node.max_nodes if count is None else count)
        self.wait("nodes Ready", lambda: all(self._ready(n) for n in names))
        return names

    def _ready(self, name: str) -> bool:
        conditions = self.core.read_node(name).status.conditions or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions)

    def remove_nodes(self, names: list[str]) -> None:
        for name in names:
            self.core.delete_node(name)

    def delete_namespace(self, name: str, timeout: float = 120) -> None:
        """Deletes a namespace and waits until the namespace controller has emptied and removed it."""
        self.core.delete_namespace(name)
        self.wait(
            f"namespace {name} gone",
            lambda: name not in {n.metadata.name for n in self.core.list_namespace().items},
            timeout,
        )

    def wait(self, what: str, check, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.3)
        raise TimeoutError(f"{what}: not after {timeout:.0f} s")


# Every test module of tests/cluster/ carries this mark: one worker, one control plane.
CLUSTER_GROUP = pytest.mark.xdist_group("cluster")
