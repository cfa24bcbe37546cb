"""The kubelet's part for the operators a stack installs on the tier: each pod of their Deployments runs
as the pinned upstream program its image is, with what the chart gave the pod.

kwok schedules nothing itself and runs no container; for the pods in the `probed` namespaces it sets
Running with an address from the node's podCIDR but not Ready (kwok.probed_stages). This class does the
rest as a kubelet would for that pod:
  - the program: the build of tools/cluster whose image repository the container names (`PROGRAMS`);
  - its arguments and environment (literal values and the pod fields a `fieldRef` names);
  - its volumes, once each Secret it mounts exists (unless optional): a ConfigMap key mounted as a file
    is written to the pod's folder and the argument that names the mount path names that file;
    Secret and emptyDir folders are a tmpfs at their own path in a mount namespace of the process's
    own, the Secret's keys kept in step with the Secret (the operators' certificate rotators write
    their Secret after start and wait for the files);
  - its credentials: the service account's projected files (a token the API server issues for it by
    TokenRequest, the cluster's CA, the namespace) and the API server's address in the environment,
    so the program finds the API server in-cluster as in its pod, and the chart's RBAC is what it
    can do;
  - its address: the listeners the config file binds to every interface (`:8081`) bind to the pod's
    address, which the host's routing table makes local (`local_pod_range`), so the API server reaches
    a webhook through the chart's Service, its endpoints and `--enable-aggregator-routing`;
  - its readiness: the pod turns Ready once the container's HTTP readiness probe answers 2xx or 3xx,
    and not Ready when the program exits (it is started again at once), as the kubelet reports it,
    so a Helm release's wait and the Deployment's availability mean what they mean on EKS.

Not as a kubelet does: no liveness probe and no restart back-off; a Secret's change reaches the files
within half a second, by a rename per file (the kubelet swaps a `..data` link, up to a minute later);
only literal and `fieldRef` environment values; the program runs as this machine's user in its
network namespace, whatever the pod's securityContext says.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import ssl
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from kubernetes import client

from support.cluster.binaries import binary
from support.cluster.kwok import repository
from support.cluster.processes import Processes
from support.paths import ROOT

# The end of an image's repository -> the program tools/cluster builds of that image's source.
PROGRAMS = {
    "kueue": "kueue",
    "trainer-controller-manager": "trainer-controller-manager",
    "jobset": "jobset-controller",
    "training-operator": "training-operator",  # ghcr.io/kubeflow/training-v1/training-operator
    "kuberay/operator": "kuberay-operator",  # quay.io/kuberay/operator
}
# The stack's training image (the tier's stacks name PREBUILT_IMAGE): a Python program of it runs as
# this checkout's workload/ under the tests' interpreter.
PYTHON_IMAGES = ("trainstack/trainer",)
PYTHON = "python"
EVERY_INTERFACE = re.compile(r"^(0\.0\.0\.0)?:(\d+)$")
# The listeners of the programs that take them as flags, not from a config file, with their defaults
# (every interface): training operator v1.9.4 cmd/training-operator.v1/main.go, KubeRay v1.6.2
# apis/config/v1alpha1/defaults.go. Each binds the pod's address instead, given or not. The training
# operator's webhook server takes a port and no host (webhook.Options{Port}), so it binds every
# interface: only one program of a harness may serve on its port (9443).
FLAG_LISTENERS = {
    "training-operator": {"--metrics-bind-address": ":8080", "--health-probe-bind-address": ":8081"},
    "kuberay-operator": {"--metrics-addr": ":8080", "--health-probe-bind-address": ":8082"},
}  # fmt: skip
# The feature gates the tier's KubeRay build knows (v1.6.2 pkg/features/features.go): the 1.7.0 chart
# also turns off three gates 1.7 added, which that build would refuse as unknown. A gate turned off
# that a build lacks is off there anyway, so those are dropped; any other stays, and fails as it would.
KUBERAY_GATES = (
    "RayClusterStatusConditions",
    "RayJobDeletionPolicy",
    "RayMultiHostIndexing",
    "RayServiceIncrementalUpgrade",
    "RayCronJob",
    "AsyncJobInfoQuery",
)


def program_of(image: str) -> str:
    found = repository(image)
    if any(found == end or found.endswith(f"/{end}") for end in PYTHON_IMAGES):
        return PYTHON
    for end, program in PROGRAMS.items():
        if found == end or found.endswith(f"/{end}"):
            return program
    raise KeyError(f"no program of tools/cluster runs image {image}")


def listening_at(program: str, args: list[str], ip: str) -> list[str]:
    """A flag-configured program's arguments with each listener on the pod's address (FLAG_LISTENERS),
    and KubeRay's gates as its build knows them (KUBERAY_GATES)."""
    defaults = dict(FLAG_LISTENERS.get(program, {}))
    found = []
    for arg in args:
        flag, eq, value = arg.partition("=")
        if flag in defaults and eq:
            defaults.pop(flag)
            if m := EVERY_INTERFACE.match(value):
                arg = f"{flag}={ip}:{m.group(2)}"
        elif program == "kuberay-operator" and flag == "--feature-gates" and eq:
            gates = [
                g for g in value.split(",") if g.split("=")[0] in KUBERAY_GATES or not g.endswith("=false")
            ]
            arg = f"{flag}={','.join(gates)}"
        found.append(arg)
    return found + [f"{flag}={ip}{port}" for flag, port in defaults.items()]


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


# The listeners a manager's Configuration binds when its file names none: the same defaults in Kueue
# 0.19.2 (apis/config/v1beta2/defaults.go), JobSet 0.12.0 (api/config/v1alpha1/defaults.go) and
# Trainer 2.3.0 (pkg/apis/config/v1alpha1/configuration_types.go): every interface.
DEFAULT_LISTENERS = {"health": ("healthProbeBindAddress", ":8081"), "metrics": ("bindAddress", ":8443")}


def served_at(config: object, ip: str) -> object:
    """A manager's config file with every listener on all interfaces (`:8081`, `0.0.0.0:8443`, those
    it binds by default included) on the pod's address, and its webhook server's host the pod's
    address: two pods' programs never share a port of this machine."""
    if isinstance(config, dict) and str(config.get("apiVersion", "")).startswith("config."):
        config = {**config, "webhook": {**(config.get("webhook") or {})}}
        for section, (key, default) in DEFAULT_LISTENERS.items():
            config[section] = {key: default, **(config.get(section) or {})}
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
    static: dict[str, dict[str, bytes]]  # mount path -> its files (the service account's projection)
    probe: tuple[str, int, str] | None  # scheme, port, path
    ready: bool = False
    written: dict[str, bytes] = field(default_factory=dict)


class OperatorPods:
    def __init__(self, api: client.ApiClient, kubeconfig: Path, processes: Processes, directory: Path,
                 namespaces: tuple[str, ...], period: float = 0.5, cloud: dict[str, str] | None = None):  # fmt: skip
        """`cloud`: the environment that points a pod's AWS SDK at the scenario's stand-in for AWS."""
        self.core = client.CoreV1Api(api)
        self.kubeconfig = yaml.safe_load(kubeconfig.read_text())
        self.processes = processes
        self.dir = directory
        self.namespaces = namespaces
        self.period = period
        self.cloud = dict(cloud or {})
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
                    if run.ready:  # the kubelet reports the container not ready until it is again
                        self._mark(run, ready=False)
                    run = None
                if run is None:
                    run = self._launch(pod)
                    if run is None:  # a Secret it mounts is not there yet: the kubelet waits too
                        continue
                    self.running[uid] = run
                self._sync(run)
                if not run.ready and self._probe(run):
                    self._mark(run, ready=True)
        for uid in set(self.running) - seen:
            self.processes.stop(self.running.pop(uid).name)

    def _launch(self, pod) -> Running | None:
        (container,) = pod.spec.containers
        program = program_of(container.image)
        name, namespace, ip = pod.metadata.name, pod.metadata.namespace, pod.status.pod_ip
        folder = self.dir / f"{namespace}-{name}"
        folder.mkdir(parents=True, exist_ok=True)
        volumes = {v.name: v for v in pod.spec.volumes or []}
        token = self._token(pod)
        ca = Path(self.kubeconfig["clusters"][0]["cluster"]["certificate-authority"]).read_bytes()
        static: dict[str, dict[str, bytes]] = {}
        files: dict[str, str] = {}  # mount path -> the file written for it
        folders: list[str] = []  # mount paths that are a tmpfs of the process's own
        secrets: dict[str, str] = {}
        for mount in container.volume_mounts or []:
            volume = volumes.get(mount.name)
            if volume is None:
                continue
            # Its path as this host resolves it (/var/run is a link to /run): the process's view under
            # /proc/<pid>/root follows no absolute link of its own.
            where = os.path.realpath(mount.mount_path)
            if volume.projected is not None:  # the service account's token, CA and namespace
                Path(where).mkdir(parents=True, exist_ok=True)
                folders.append(where)
                static[where] = {
                    "token": token.encode(),
                    "ca.crt": ca,
                    "namespace": namespace.encode(),
                }
            elif volume.config_map is not None and mount.sub_path:
                data = self.core.read_namespaced_config_map(volume.config_map.name, namespace).data
                text = data[mount.sub_path]
                if mount.sub_path.endswith((".yaml", ".yml")):
                    text = yaml.safe_dump(served_at(yaml.safe_load(text), ip), sort_keys=False)
                path = folder / Path(mount.mount_path).name
                path.write_text(text)
                files[mount.mount_path] = str(path)
            elif volume.secret is not None or volume.empty_dir is not None:
                if volume.secret is not None:
                    if not volume.secret.optional and not self._exists(volume.secret.secret_name, namespace):
                        return None
                    secrets[where] = volume.secret.secret_name
                Path(where).mkdir(parents=True, exist_ok=True)  # a mount point on this host
                folders.append(where)
        args = listening_at(program, [*(container.command or [])[1:], *(container.args or [])], ip)
        for i, arg in enumerate(args):
            flag, eq, value = arg.partition("=")
            if eq and value in files:
                args[i] = f"{flag}={files[value]}"
        # What the kubelet gives every container to find the API server in-cluster (with the service
        # account's files above): its address, since nothing here proxies the `kubernetes` Service.
        server = urllib.parse.urlsplit(self.kubeconfig["clusters"][0]["cluster"]["server"])
        env = {"KUBERNETES_SERVICE_HOST": server.hostname, "KUBERNETES_SERVICE_PORT": str(server.port)}
        env |= self.cloud
        if program == PYTHON:
            env["PYTHONPATH"] = str(ROOT / "workload")
        fields = {"metadata.namespace": namespace, "metadata.name": name, "status.podIP": ip,
                  "spec.serviceAccountName": pod.spec.service_account_name or "default"}  # fmt: skip
        for e in container.env or []:
            if e.value is not None:
                env[e.name] = e.value
            elif e.value_from is not None and e.value_from.field_ref is not None:
                env[e.name] = fields[e.value_from.field_ref.field_path]
        # The volumes' files are in place before the program starts, as the kubelet has them.
        contents = self._contents(namespace, secrets, static)
        steps = []
        for i, where in enumerate(folders):
            staged = folder / "volumes" / str(i)
            staged.mkdir(parents=True, exist_ok=True)
            for key, content in contents.get(where, {}).items():
                (staged / key).write_bytes(content)
            steps.append(f"mount -t tmpfs tmpfs {where} && cp -a {staged}/. {where}/")
        script = " && ".join([*steps, 'exec "$@"'])
        executable = sys.executable if program == PYTHON else binary(program)
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", executable, *args]
        process = f"{program}@{name}"
        proc = self.processes.start(process, argv, env)
        run = Running(process, namespace, name, ip, proc, secrets, static, _probe_of(container))
        for where, files in contents.items():
            for key, content in files.items():
                run.written[f"/proc/{proc.pid}/root{where}/{key}"] = content
        return run

    def _contents(
        self, namespace: str, secrets: dict[str, str], static: dict[str, dict[str, bytes]]
    ) -> dict[str, dict[str, bytes]]:
        """mount path -> its files now: the projected ones, and each Secret's keys (none before the
        Secret exists: the certificate rotators make theirs)."""
        found = dict(static)
        for mount_path, secret in secrets.items():
            try:
                data = self.core.read_namespaced_secret(secret, namespace).data or {}
            except client.ApiException as err:
                if err.status != 404:
                    raise
                data = {}
            found[mount_path] = {k: base64.b64decode(v) for k, v in data.items()}
        return found

    def _exists(self, secret: str, namespace: str) -> bool:
        try:
            self.core.read_namespaced_secret(secret, namespace)
        except client.ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def _token(self, pod) -> str:
        """A token of the pod's service account, issued by the API server (TokenRequest), as the
        kubelet projects one into the pod."""
        account = pod.spec.service_account_name or "default"
        return self.core.create_namespaced_service_account_token(
            account, pod.metadata.namespace, {"spec": {"expirationSeconds": 24 * 3600}}
        ).status.token

    def _sync(self, run: Running) -> None:
        """Each Secret volume's keys as files in the process's own mount of it (under /proc/<pid>/root,
        its view of the filesystem), rewritten when the Secret changes, as the kubelet's volume
        manager keeps them."""
        for mount_path, contents in self._contents(run.namespace, run.secrets, {}).items():
            root = Path(f"/proc/{run.proc.pid}/root") / mount_path.lstrip("/")
            try:  # its own tmpfs yet? (mounted just after the process starts)
                if root.stat().st_dev == Path(mount_path).stat().st_dev:
                    continue
            except OSError:
                continue
            for key, content in contents.items():
                target = root / key
                if run.written.get(str(target)) == content:
                    continue
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
                return 200 <= r.status < 400  # the kubelet's HTTP probe (pkg/probe/http/http.go)
        except OSError:
            return False

    def _mark(self, run: Running, ready: bool) -> None:
        """The pod's Ready and ContainersReady conditions and its container's `ready`, as the kubelet
        reports them after a probe passes, or after the container exits."""
        pod = self.core.read_namespaced_pod(run.pod, run.namespace)
        status = "True" if ready else "False"
        conditions = [
            {"type": c.type, "status": status if c.type in ("Ready", "ContainersReady") else c.status}
            for c in pod.status.conditions or []
        ]
        statuses = [{"name": c.name, "ready": ready} for c in pod.status.container_statuses or []]
        self.core.patch_namespaced_pod_status(
            run.pod, run.namespace, {"status": {"conditions": conditions, "containerStatuses": statuses}}
        )
        run.ready = ready


def _probe_of(container) -> tuple[str, int, str] | None:
    """(scheme, port, path) of the container's HTTP readiness probe, its named port resolved."""
    probe = container.readiness_probe
    if probe is None or probe.http_get is None:
        return None
    port = probe.http_get.port
    if isinstance(port, str) and not port.isdigit():
        port = next(p.container_port for p in container.ports or [] if p.name == port)
    return (probe.http_get.scheme or "HTTP").lower(), int(port), probe.http_get.path or "/"
