"""One cluster for the tests of tests/cluster/: the control plane, kwok and the device-plugin
stand-in, started once per session (pytest-xdist keeps those tests on one worker: the `cluster`
group). Nodes and operators are added by the scenarios that need them."""

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
from support.cluster.operators import Operators

# The taint the API server's TaintNodesByCondition admission puts on every new node, and that the node
# lifecycle controller (kube-controller-manager) removes once it has seen the node Ready.
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
SEEN_LABEL = "trainstack.test/seen"  # the scheduler's cache barrier (`scheduler_has_seen`)
PROBE_NAMESPACE = "default"


class Cluster:
    def __init__(self, directory: Path, probed: tuple[str, ...] = ()):
        """`probed`: namespaces whose pods the harness makes Ready only once their readiness probe
        passes (support/cluster/pods.py), instead of kwok at once."""
        self.dir = directory
        self.probed = probed
        self.control_plane = ControlPlane(directory)
        self.kubeconfig = self.control_plane.kubeconfig
        self.processes = self.control_plane.processes
        self.bin_dir = BIN
        self._rounds = 0
        # Deleted, not yet waited for (`settle`): namespaces, and cluster-wide objects by
        # (apiVersion, kind, name).
        self.leaving: set[str] = set()
        self.leaving_objects: set[tuple[str, str, str]] = set()

    def start(self) -> None:
        self.control_plane.start()
        self.api = kube_config.new_client_from_config(str(self.kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.objects = Objects(self.api)
        start_kwok(self.processes, self.kubeconfig, self.probed)
        self.processes.wait_until(
            "the default ServiceAccount",
            lambda: self.core.read_namespaced_service_account("default", "default") is not None,
            120,
            "kube-controller-manager",
        )
        self.device_plugins = DevicePlugins(self.api)
        self.device_plugins.start()
        self.operators = Operators(
            self.dir, self.processes, self.objects, self.control_plane.pki, self.kubeconfig
        )

    def stop(self) -> None:
        if hasattr(self, "device_plugins"):
            self.device_plugins.stop()
        self.control_plane.stop()

    def add_nodes(
        self, node: Node, count: int | None = None, pod_cidrs: list[str] | None = None
    ) -> list[str]:
        """`count` (default: the group's most) kwok nodes shaped like `node`, once Ready, untainted by
        the node lifecycle controller (so in kube-controller-manager's node cache, which the
        DaemonSet controller shares), and in the scheduler's cache; `pod_cidrs`, one per node, the
        ranges their pods' addresses come from."""
        names = create_nodes(self.core, node, node.max_nodes if count is None else count, pod_cidrs)
        self.wait("nodes Ready and untainted", lambda: all(self._ready(n) for n in names))
        self.scheduler_has_seen(names)
        return names

    def _ready(self, name: str) -> bool:
        node = self.core.read_node(name)
        conditions = node.status.conditions or []
        taints = node.spec.taints or []
        return any(c.type == "Ready" and c.status == "True" for c in conditions) and not any(
            t.key == NOT_READY_TAINT for t in taints
        )

    def scheduler_has_seen(self, names: list[str], timeout: float = 120) -> None:
        """Returns once the scheduler's cache holds each node as it is now. A node written to the API
        server reaches the scheduler later, through its watch: a pod sent before then is found
        unschedulable against the old node, and only retried when the node's event arrives. So each
        node gets a label written after every earlier change, and a pod that only a node carrying
        that label can take (it asks for nothing and tolerates every taint); the scheduler reads a
        node's events in order, so once the pod is bound, its cache has every earlier change too."""
        self._rounds += 1
        mark = str(self._rounds)
        for name in names:
            self.core.patch_node(name, {"metadata": {"labels": {SEEN_LABEL: mark}}})
        probes = {}
        for name in names:
            probe = f"seen-{mark}-{name}"
            probes[probe] = name
            self.core.create_namespaced_pod(
                PROBE_NAMESPACE,
                {
                    "metadata": {"name": probe, "labels": {SEEN_LABEL: mark}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": name, SEEN_LABEL: mark},
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": "probe", "image": "probe"}],
                    },
                },
            )

        def probes_now() -> dict[str, str | None]:
            listed = self.core.list_namespaced_pod(PROBE_NAMESPACE, label_selector=f"{SEEN_LABEL}={mark}")
            return {p.metadata.name: p.spec.node_name for p in listed.items}

        try:
            self.wait("the scheduler's cache up to date", lambda: probes_now() == probes, timeout)
        finally:
            self.core.delete_collection_namespaced_pod(
                PROBE_NAMESPACE, label_selector=f"{SEEN_LABEL}={mark}", grace_period_seconds=0
            )
            self.wait("the scheduler's probes gone", lambda: not probes_now())

    def remove_nodes(self, names: list[str]) -> None:
        for name in names:
            self.core.delete_node(name)

    def delete_namespace(self, name: str) -> None:
        """Deletes a namespace without waiting for it. It is Terminating at once, so no pod can be
        created in it from then on (the NamespaceLifecycle admission); its pods are removed at once
        (grace 0: no kubelet has to confirm, so removing their nodes next leaves none behind); the
        namespace controller empties it of the rest and removes it 5 s later at the soonest
        (kube-controller-manager's namespaceDeletionGracePeriod), longer while finalizers run.
        Whoever needs its name again, or a cluster without it, calls `settle`."""
        self.core.delete_namespace(name)
        self.core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        self.leaving.add(name)

    def delete_object(self, api_version: str, kind: str, name: str) -> None:
        """Deletes a cluster-wide object without waiting: one its controller holds with a finalizer
        (Kueue's on a ClusterQueue that still has workloads) goes once they are gone."""
        self.objects.resource(api_version, kind).delete(name=name)
        self.leaving_objects.add((api_version, kind, name))

    def settle(self, timeout: float = 120) -> None:
        """Waits until everything deleted earlier without waiting is gone."""

        def gone() -> bool:
            namespaces = {n.metadata.name for n in self.core.list_namespace().items}
            return not self.leaving & namespaces and not any(
                self.objects.get(api_version, kind, name) for api_version, kind, name in self.leaving_objects
            )

        self.wait("what earlier tests deleted gone", gone, timeout)
        self.leaving.clear()
        self.leaving_objects.clear()

    def wait(self, what: str, check, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.3)
        raise TimeoutError(f"{what}: not after {timeout:.0f} s")


# The test modules of tests/cluster/ on the session's control plane carry this mark: one worker, one
# control plane, one module after another.
CLUSTER_GROUP = pytest.mark.xdist_group("cluster")
# Those that start a control plane of their own (a cluster shaped as their scenario needs) carry this
# one: one worker too, beside the session's, so the two halves of the tier run at the same time.
OWN_CLUSTER_GROUP = pytest.mark.xdist_group("cluster-own")
