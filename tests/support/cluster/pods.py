"""The kubelet's part for the operators a stack installs on the tier: each pod of their Deployments runs
as the pinned upstream program its image is, with what the chart gave the pod.

kwok schedules nothing itself and runs no container; for the pods in the `probed` namespaces it sets
Running with an address from the node's podCIDR but not Ready (kwok.probed_stages). This class does the
rest as a kubelet would for that pod:
  - the program: the build of tools/cluster whose image repository the container names (`PROGRAMS`);
  - its arguments and environment (literal values and the pod fields a `fieldRef` names);
  - its volumes: a ConfigMap key mounted as a file is written to the pod's folder and the argument that
    names the mount path names that file; Secret and emptyDir folders are a tmpfs at their own path in
    a mount namespace of the process's own, the Secret's keys kept in step with the Secret as the
    kubelet's volume manager keeps them (the operators' certificate rotators write their Secret after
    start and wait for the files);
  - its credentials: a token of the pod's service account (TokenRequest), so the chart's RBAC is what
    the program can do;
  - its address: the listeners the config file binds to every interface (`:8081`) bind to the pod's
    address, which the host's routing table makes local (`local_pod_range`), so the API server reaches
    a webhook through the chart's Service, its endpoints and `--enable-aggregator-routing`;
  - its readiness: the pod turns Ready once the container's readiness probe answers 200, as the kubelet
    reports it, so a Helm release's wait and the Deployment's availability mean what they mean on EKS.
"""

from __future__ import annotations

import base64
import contextlib
import re
import ssl
import subprocess
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client

from support.cluster.binaries import binary
from support.cluster.kwok import repository
from support.cluster.processes import Processes

# The last element of an image's repository -> the program tools/cluster builds of that image's source.
PROGRAMS = {
    "kueue": "kueue",
    "trainer-controller-manager": "trainer-controller-manager",
    "jobset": "jobset-controller",
}
EVERY_INTERFACE = re.compile(r"^(0\.0\.0\.0)?:(\d+)$")


@contextlib.contextmanager
def local_pod_range(cidr: str):
    """Every address of `cidr` local to this machine while the block runs (Linux's AnyIP: a `local`
    route on the loopback device), so a program can bind a pod's address and be reached at it."""
    done = subprocess.run(["ip", "route", "add", "local", cidr, "dev", "lo"], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"`ip route add local {cidr} dev lo` failed (it needs CAP_NET_ADMIN): {done.stderr}"
        )
    try:
        yield
    finally:
        subprocess.run(["ip", "route", "del", "local", cidr, "dev", "lo"], capture_output=True, check=False)


def served_at(config: object, ip: str) -> object:
    """A manager's config file with every listener on all interfaces (`:8081`, `0.0.0.0:8443`) on the
    pod's address, and its webhook server's host the pod's address."""
    if isinstance(config, dict):
        found = {k: served_at(v, ip) for k, v in config.items()}
        if isinstance(found.get("webhook"), dict):
            found["webhook"] = {**found["webhook"], "host": ip}
        return found
    if isinstance(config, list):
        return [served_at(v, ip) for v in config]
    if isinstance(config, str) and (m := EVERY_INTERFACE.match(config)):
        return f"{ip}:{m.group(2)}"
    return config


@dataclass
class Running:
    name: str  # the process's name among the harness's
    namespace: str
    pod: str
    ip: str
    proc: subprocess.Popen
    secrets: dict[str, str]  # mount path -> Secret name
    probe: tuple[str, int, str] | None  # scheme, port, path
    ready: bool = False
    written: dict[str, bytes] = field(default_factory=dict)


class OperatorPods:
    def __init__(self, api: client.ApiClient, kubeconfig: Path, processes: Processes, directory: Path,
                 namespaces: tuple[str, ...], period: float = 0.5):  # fmt: skip
        self.core = client.CoreV1Api(api)
        self.kubeconfig = yaml.safe_load(kubeconfig.read_text())
        self.processes = processes
        self.dir = directory
        self.namespaces = namespaces
        self.period = period
        self.running: dict[str, Running] = {}  # pod uid -> its process
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for run in list(self.running.values()):
            self.processes.stop(run.name)
        self.running.clear()

    def programs(self) -> dict[str, str]:
        """pod name -> the program running it, now."""
        return {r.pod: r.name.split("@")[0] for r in self.running.values()}

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            try:
                self._round()
            except Exception as err:
                self.errors.append(repr(err))

    def _round(self) -> None:
        seen = set()
        for namespace in self.namespaces:
            for pod in self.core.list_namespaced_pod(namespace).items:
                uid = pod.metadata.uid
                if pod.metadata.deletion_timestamp or pod.status.phase != "Running" or not pod.status.pod_ip:
                    continue
                seen.add(uid)
                run = self.running.get(uid)
                if run is not None and run.proc.poll() is not None:  # restartPolicy Always
                    self.processes.stop(run.name)
                    run = None
                if run is None:
                    run = self.running[uid] = self._launch(pod)
                self._sync(run)
                if not run.ready and self._probe(run):
                    self._mark_ready(run)
        for uid in set(self.running) - seen:
            self.processes.stop(self.running.pop(uid).name)

    def _launch(self, pod) -> Running:
        (container,) = pod.spec.containers
        program = PROGRAMS[repository(container.image).rsplit("/", 1)[-1]]
        name, namespace, ip = pod.metadata.name, pod.metadata.namespace, pod.status.pod_ip
        folder = self.dir / f"{namespace}-{name}"
        folder.mkdir(parents=True, exist_ok=True)
        volumes = {v.name: v for v in pod.spec.volumes or []}
        files: dict[str, str] = {}  # mount path -> the file written for it
        folders: list[str] = []  # mount paths that are a tmpfs of the process's own
        secrets: dict[str, str] = {}
        for mount in container.volume_mounts or []:
            volume = volumes.get(mount.name)
            if volume is None or volume.projected is not None:  # the service account's token: below
                continue
            if volume.config_map is not None and mount.sub_path:
                data = self.core.read_namespaced_config_map(volume.config_map.name, namespace).data
                text = data[mount.sub_path]
                if mount.sub_path.endswith((".yaml", ".yml")):
                    text = yaml.safe_dump(served_at(yaml.safe_load(text), ip), sort_keys=False)
                path = folder / Path(mount.mount_path).name
                path.write_text(text)
                files[mount.mount_path] = str(path)
            elif volume.secret is not None or volume.empty_dir is not None:
                Path(mount.mount_path).mkdir(parents=True, exist_ok=True)  # a mount point on this host
                folders.append(mount.mount_path)
                if volume.secret is not None:
                    secrets[mount.mount_path] = volume.secret.secret_name
        args = [*(container.command or [])[1:], *(container.args or [])]
        for i, arg in enumerate(args):
            flag, eq, value = arg.partition("=")
            if eq and value in files:
                args[i] = f"{flag}={files[value]}"
        env = {"KUBECONFIG": str(self._pod_kubeconfig(pod, folder))}
        fields = {"metadata.namespace": namespace, "metadata.name": name, "status.podIP": ip,
                  "spec.serviceAccountName": pod.spec.service_account_name or "default"}  # fmt: skip
        for e in container.env or []:
            if e.value is not None:
                env[e.name] = e.value
            elif e.value_from is not None and e.value_from.field_ref is not None:
                env[e.name] = fields[e.value_from.field_ref.field_path]
        mounts = " && ".join(f"mount -t tmpfs tmpfs {f}" for f in folders) or "true"
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", f'{mounts} && exec "$@"', "sh",
                binary(program), *args]  # fmt: skip
        process = f"{program}@{name}"
        proc = self.processes.start(process, argv, env)
        return Running(process, namespace, name, ip, proc, secrets, _probe_of(container))

    def _pod_kubeconfig(self, pod, folder: Path) -> Path:
        """A kubeconfig for the API server as the pod's service account, with a token the API server
        issues for it (TokenRequest), as the kubelet projects one into the pod."""
        account = pod.spec.service_account_name or "default"
        token = self.core.create_namespaced_service_account_token(
            account, pod.metadata.namespace, {"spec": {"expirationSeconds": 24 * 3600}}
        ).status.token
        config = {**self.kubeconfig, "users": [{"name": "pod", "user": {"token": token}}]}
        config["contexts"] = [{**c, "context": {**c["context"], "user": "pod"}} for c in config["contexts"]]
        path = folder / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path

    def _sync(self, run: Running) -> None:
        """Each Secret volume's keys as files in the process's own mount of it (under /proc/<pid>/root,
        its view of the filesystem), rewritten when the Secret changes."""
        for mount_path, secret in run.secrets.items():
            try:
                data = self.core.read_namespaced_secret(secret, run.namespace).data or {}
            except client.ApiException as err:
                if err.status == 404:  # not written yet: the rotator makes it
                    continue
                raise
            root = Path(f"/proc/{run.proc.pid}/root") / mount_path.lstrip("/")
            for key, value in data.items():
                content = base64.b64decode(value)
                target = root / key
                if run.written.get(str(target)) == content:
                    continue
                with contextlib.suppress(OSError):  # the mount is made just after the process starts
                    staged = root / f".{key}.tmp"
                    staged.write_bytes(content)
                    staged.rename(target)
                    run.written[str(target)] = content

    def _probe(self, run: Running) -> bool:
        if run.probe is None:
            return True
        scheme, port, path = run.probe
        context = ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(f"{scheme}://{run.ip}:{port}{path}", timeout=2, context=context) as r:
                return r.status == 200
        except OSError:
            return False

    def _mark_ready(self, run: Running) -> None:
        pod = self.core.read_namespaced_pod(run.pod, run.namespace)
        conditions = [
            {"type": c.type, "status": "True" if c.type in ("Ready", "ContainersReady") else c.status}
            for c in pod.status.conditions or []
        ]
        statuses = [{"name": c.name, "ready": True} for c in pod.status.container_statuses or []]
        self.core.patch_namespaced_pod_status(
            run.pod, run.namespace, {"status": {"conditions": conditions, "containerStatuses": statuses}}
        )
        run.ready = True


def _probe_of(container) -> tuple[str, int, str] | None:
    """(scheme, port, path) of the container's HTTP readiness probe, its named port resolved."""
    probe = container.readiness_probe
    if probe is None or probe.http_get is None:
        return None
    port = probe.http_get.port
    if isinstance(port, str) and not port.isdigit():
        port = next(p.container_port for p in container.ports or [] if p.name == port)
    return (probe.http_get.scheme or "HTTP").lower(), int(port), probe.http_get.path or "/"
