"""etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback, as envtest
(controller-runtime pkg/internal/testing/controlplane) and kwokctl's binary runtime
(kwok pkg/kwokctl/components) start them: certificates made in a temporary directory, an admin
client in system:masters, the API server's default admission plugins and RBAC."""

from __future__ import annotations

import ssl
import urllib.request
from pathlib import Path

import yaml

from support.cluster.binaries import binary
from support.cluster.pki import Pki
from support.cluster.processes import Processes
from support.ports import unused_port

SERVICE_RANGE = "10.96.0.0/16"


def write_kubeconfig(path: Path, server: str, pki: Pki, context: str = "trainstack-test") -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": context,
                        "cluster": {"server": server, "certificate-authority": str(pki.ca.cert)},
                    }
                ],
                "users": [
                    {
                        "name": "admin",
                        "user": {"client-certificate": str(pki.admin.cert), "client-key": str(pki.admin.key)},
                    }
                ],
                "contexts": [{"name": context, "context": {"cluster": context, "user": "admin"}}],
                "current-context": context,
            }
        )
    )
    return path


# The API server's live heap here is most of a gigabyte (the operators' CRD schemas, which it holds
# as trees of small objects), and Go's default collector walked it every time the heap doubled.
# Collected only near 3 GiB (its resident memory then peaks there) it spent 108 -> 77-82 CPU-seconds
# over tests/cluster alone on the 2-core machine (about 12 in a full run, where both cores are busy);
# a 1 GiB limit made it worse (129: it collects nonstop).
APISERVER_GC = {"GOGC": "off", "GOMEMLIMIT": "3GiB"}


class ControlPlane:
    def __init__(self, directory: Path):
        self.dir = directory
        self.pki = Pki(directory / "pki")
        self.processes = Processes(directory)
        self.port = unused_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.kubeconfig = write_kubeconfig(directory / "kubeconfig", self.server, self.pki)

    def _ready(self, path: str) -> bool:
        context = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        context.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        with urllib.request.urlopen(f"{self.server}{path}", context=context, timeout=5) as r:
            return r.status == 200

    def start(self) -> None:
        etcd_port, peer_port = unused_port(), unused_port()
        etcd_url, peer_url = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{peer_port}"
        self.processes.start(
            "etcd",
            [
                binary("etcd"),
                f"--data-dir={self.dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        pki = self.pki
        self.processes.start(
            "kube-apiserver",
            [
                binary("kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.dir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.serving.cert}",
                f"--tls-private-key-file={pki.serving.key}",
                f"--client-ca-file={pki.ca.cert}",
                f"--service-account-key-file={pki.service_account_key}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                # The `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints refuse.
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                # Webhooks and APIServices named by Service are called at an endpoint (a pod's address)
                # instead of the Service's cluster IP, which nothing proxies here: how a chart's own
                # webhook configuration reaches the operator's pod on the tier.
                "--enable-aggregator-routing=true",
                "--profiling=false",
            ],
            env=APISERVER_GC,
        )
        self.processes.wait_until(
            "etcd", lambda: urllib.request.urlopen(f"{etcd_url}/health", timeout=2), 60, "etcd"
        )
        self.processes.wait_until("kube-apiserver", lambda: self._ready("/readyz"), 120, "kube-apiserver")
        common = [f"--kubeconfig={self.kubeconfig}", "--leader-elect=false"]
        self.processes.start(
            "kube-controller-manager",
            [
                binary("kube-controller-manager"),
                *common,
                "--secure-port=0",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca.cert}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--use-service-account-credentials=false",
                "--concurrent-gc-syncs=5",
            ],
        )
        self.processes.start(
            "kube-scheduler",
            [
                binary("kube-scheduler"),
                *common,
                "--bind-address=127.0.0.1",
                f"--secure-port={unused_port()}",
                f"--authentication-kubeconfig={self.kubeconfig}",
                f"--authorization-kubeconfig={self.kubeconfig}",
            ],
        )

    def stop(self) -> None:
        self.processes.stop_all()
