"""The operators the stack runs, as local processes against the harness's API server, built from
the versions tools/cluster pins: Kueue, the KubeRay operator and the Kubeflow training operator.

Each is first laid on the cluster as its own install lays it (the chart rendered by the real helm
from ../shared/charts, or the training operator's kustomize base from its module): CRDs, RBAC, its
namespace, its Deployment (whose pod kwok runs on a system node, so the cluster shows the operator as
a cluster that runs it does) and its webhook configurations. The webhooks point at the local
process by URL with the harness's CA, as controller-runtime's envtest serves webhooks."""

from __future__ import annotations

import base64
import shutil
import subprocess
import urllib.request
from pathlib import Path

import yaml

from components.operators import trainer_values
from components.queueing import kueue_values
from offline.nodes import charts_dir
from support.charts import documents, helm_template, load
from support.cluster.binaries import binary, module_dir, pinned
from support.cluster.objects import Objects
from support.cluster.pki import Pki
from support.cluster.processes import Processes
from support.ports import unused_port

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
# Served by Kueue's visibility server, which the harness does not run: an APIService nobody answers
# breaks discovery for every client.
SKIPPED_KINDS = ("APIService",)


def point_webhooks(obj: dict, port: int, ca: bytes) -> dict:
    """A webhook configuration whose webhooks, or a CRD whose conversion webhook, call
    https://127.0.0.1:<port><path> trusting `ca` (PEM)."""
    bundle = base64.b64encode(ca).decode()
    if obj["kind"] == "CustomResourceDefinition":
        webhook = ((obj["spec"].get("conversion") or {}).get("webhook")) or {}
        hooks = [webhook] if webhook.get("clientConfig") else []
    else:
        hooks = obj.get("webhooks") or []
    for hook in hooks:
        path = (hook["clientConfig"].get("service") or {}).get("path", "/")
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
    return obj


def _namespaced(objs: list[dict], namespace: str) -> list[dict]:
    for o in objs:
        if o["kind"] not in (
            "CustomResourceDefinition",
            "Namespace",
            "ClusterRole",
            "ClusterRoleBinding",
            *WEBHOOK_KINDS,
        ):
            o["metadata"].setdefault("namespace", namespace)
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}, *objs]


class Operators:
    def __init__(self, directory: Path, processes: Processes, objects: Objects, pki: Pki, kubeconfig: Path):
        self.dir = directory
        self.processes = processes
        self.objects = objects
        self.pki = pki
        self.env = {"KUBECONFIG": str(kubeconfig)}
        self.kubeconfig = kubeconfig
        self.started = False

    def start_all(self, system_selector: dict[str, str]) -> None:
        """Every operator the stack installs, once per cluster, in the order the stack installs them:
        Kueue last (components/queueing.py), since Kueue sets up a job kind's integration, and
        Trainer's runtimes its TrainJob webhook needs, only once that kind's API is served, polling
        up to every 2 minutes if it was not at start (kueue v0.19.2 jobframework/setup.go
        WaitForAPI); until then its webhook refuses every TrainJob."""
        if self.started:
            return
        self.trainer(system_selector)
        self.kuberay(system_selector)
        self.training_operator(system_selector)
        self.kueue(system_selector)
        self.started = True

    def _certs(self, name: str, *dns: str) -> Path:
        """A serving certificate for 127.0.0.1 (and `dns`), as tls.crt/tls.key in its own folder."""
        pair = self.pki.issue(f"{name}-webhook", "127.0.0.1", server=True, dns=dns)
        folder = self.dir / f"{name}-certs"
        folder.mkdir(exist_ok=True)
        shutil.copy(pair.cert, folder / "tls.crt")
        shutil.copy(pair.key, folder / "tls.key")
        return folder

    def _wait_ready(self, name: str, probe_port: int, timeout: float = 120) -> None:
        url = f"http://127.0.0.1:{probe_port}/readyz"
        self.processes.wait_until(
            name, lambda: urllib.request.urlopen(url, timeout=2).status == 200, timeout, name
        )

    # --- Kueue ----------------------------------------------------------------------------------

    def kueue(
        self,
        system_selector: dict[str, str],
        pods_ready_timeout_minutes: int = 15,
        frameworks: tuple[str, ...] | None = None,
    ) -> None:
        """Kueue as the stack installs it: the chart with the stack's values (components.queueing);
        `frameworks`: the job kinds its Configuration manages instead of the stack's (a Kueue the
        cluster's owner configured)."""
        namespace = "kueue-system"
        objs = helm_template(
            charts_dir() / f"kueue-{pinned('kueue', 'sigs.k8s.io/kueue').lstrip('v')}",
            "kueue",
            namespace,
            _managing(
                kueue_values(pods_ready_timeout_minutes, system_selector, provisioning=False), frameworks
            ),
        )
        port, probe = unused_port(), unused_port()
        config = next(
            o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "kueue-manager-config"
        )
        manager = yaml.safe_load(config["data"]["controller_manager_config.yaml"])
        cert_management = manager["internalCertManagement"]
        secret = cert_management["webhookSecretName"]
        # Kueue's own certificate management stays on (without it, it wants its metrics certificate
        # in /etc/kueue/metrics/certs): its rotator keeps the harness's Secret and injects its CA
        # into the webhook configurations and the CRDs' conversion webhooks (pkg/util/cert).
        pem = self.pki.rotator_secret(
            "kueue-certs", "kueue-ca", f"{cert_management['webhookServiceName']}.{namespace}.svc"
        )
        manager |= _served_here(port, probe, certDir=str(self.pki.dir / "kueue-certs"))
        path = self.dir / "kueue-config.yaml"
        path.write_text(yaml.safe_dump(manager))
        objs = [
            point_webhooks(o, port, pem["ca.crt"])
            if o["kind"] in (*WEBHOOK_KINDS, "CustomResourceDefinition")
            else o
            for o in objs
            if o["kind"] not in SKIPPED_KINDS
            and not (o["kind"] == "Secret" and o["metadata"]["name"] == secret)
        ]
        objs.append(_secret(secret, namespace, pem))
        self.objects.apply_all(_namespaced(objs, namespace))
        # No visibility server: it listens on a fixed port (8082), and its APIService is left out.
        self.processes.start(
            "kueue",
            [
                binary("kueue"),
                f"--config={path}",
                f"--kubeconfig={self.kubeconfig}",
                "--feature-gates=VisibilityOnDemand=false",
            ],
            self.env,
        )
        self._wait_ready("kueue", probe)

    # --- KubeRay --------------------------------------------------------------------------------

    def kuberay(self, system_selector: dict[str, str]) -> None:
        """The KubeRay operator: the chart's objects (its crds/ are not rendered by `helm template`),
        and the CRDs of the operator version that runs."""
        version = pinned("kuberay", "github.com/ray-project/kuberay/ray-operator")
        objs = helm_template(
            charts_dir() / "kuberay-operator-1.7.0",
            "kuberay-operator",
            "kuberay-system",
            {"image": {"tag": version}, "nodeSelector": dict(system_selector)},
        )
        crds = (
            module_dir("kuberay", "github.com/ray-project/kuberay/ray-operator") / "config" / "crd" / "bases"
        )
        objs += [load(p) for p in sorted(crds.glob("ray.io_*.yaml"))]
        self.objects.apply_all(_namespaced(objs, "kuberay-system"))
        probe = unused_port()
        self.processes.start(
            "kuberay-operator",
            [
                binary("kuberay-operator"),
                "--metrics-addr=0",
                f"--health-probe-bind-address=127.0.0.1:{probe}",
                "--enable-leader-election=false",
            ],
            self.env,
        )
        self._wait_ready("kuberay-operator", probe)

    # --- the training operator ------------------------------------------------------------------

    def training_operator(self, system_selector: dict[str, str]) -> None:
        """The training operator from its kustomize base (namespace kubeflow, as its standalone
        overlay sets). Its certificate rotator keeps a Secret's certificate while it is valid for
        its Service's name: the harness's, which is valid for 127.0.0.1 too."""
        namespace = "kubeflow"
        base = module_dir("training-operator", "github.com/kubeflow/training-operator") / "manifests" / "base"
        objs = [load(p) for p in sorted((base / "crds").glob("kubeflow.org_*.yaml"))]
        for name in (
            "rbac/cluster-role-binding.yaml",
            "rbac/role.yaml",
            "rbac/service-account.yaml",
            "service.yaml",
            "deployment.yaml",
        ):
            objs += documents((base / name).read_text())
        webhook = load(base / "webhook" / "manifests.yaml")
        for op in load(base / "webhook" / "patch.yaml"):
            if op["path"] == "/metadata/name":
                webhook["metadata"]["name"] = op["value"]
        port, pem = unused_port(), self._training_operator_certs(namespace)
        objs.append(point_webhooks(webhook, port, pem["ca.crt"]))
        for o in objs:
            if o["kind"] == "ClusterRoleBinding":
                for s in o.get("subjects") or []:
                    s["namespace"] = namespace
            if o["kind"] == "Deployment":
                o["spec"]["template"]["spec"]["nodeSelector"] = dict(system_selector)
        objs.append(_secret("training-operator-webhook-cert", namespace, pem))
        self.objects.apply_all(_namespaced(objs, namespace))
        self._run_training_operator(namespace, port, ("pytorchjob",))

    def training_operator_of(self, namespace: str, name: str, program: str) -> None:
        """The process of a training operator Deployment another install laid on the cluster (kwok
        runs its pod, not its container): `program`, the pinned build of the version its image is,
        with the arguments its container was given and its namespace, its listeners moved to free
        ports of 127.0.0.1. HyperPod's chart runs a v1.7 build (kubeflow/training-operator:v1-855e096),
        which serves no webhook: the API server calls none, as on HyperPod."""
        deployment = self.objects.get("apps/v1", "Deployment", name, namespace)
        assert deployment is not None, f"no Deployment {namespace}/{name}"
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        given = [*(container.get("command") or [])[1:], *(container.get("args") or [])]
        probe = unused_port()
        argv = [
            binary(program),
            *given,
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            f"--monitoring-port={unused_port()}",  # v1.7's name for the webhook server's port
        ]
        self.processes.start(program, argv, {**self.env, "MY_POD_NAMESPACE": namespace})
        self._wait_ready(program, probe)

    def _training_operator_certs(self, namespace: str) -> dict[str, bytes]:
        # Its rotator (pkg/cert) keeps this Secret and writes it to its fixed certificate folder.
        return self.pki.rotator_secret(
            "training-operator-certs", "training-operator-ca", f"training-operator.{namespace}.svc"
        )

    def _run_training_operator(self, namespace: str, port: int, schemes: tuple[str, ...]) -> None:
        probe = unused_port()
        argv = [
            binary("training-operator"),
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            f"--webhook-server-port={port}",
            *[f"--enable-scheme={s}" for s in schemes],
        ]
        # Its certificate folder is fixed (/tmp/k8s-webhook-server/serving-certs), where a pod would
        # mount the Secret (the rotator waits for tls.crt there): a private mount keeps two
        # harnesses on one machine from serving each other's certificate.
        source = self.pki.dir / "training-operator-certs"
        fixed = Path("/tmp/k8s-webhook-server/serving-certs")
        fixed.mkdir(parents=True, exist_ok=True)
        if subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False).returncode != 0:
            for name in ("tls.crt", "tls.key"):  # no private mount: the one folder of this machine
                shutil.copy(source / name, fixed / name)
        else:
            argv = [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                f'mount -t tmpfs tmpfs {fixed} && cp {source}/tls.crt {source}/tls.key {fixed}/ && exec "$@"',
                "sh",
                *argv,
            ]
        self.processes.start("training-operator", argv, {**self.env, "MY_POD_NAMESPACE": namespace})
        self._wait_ready("training-operator", probe)

    # --- Trainer and JobSet -----------------------------------------------------------------------

    def trainer(self, system_selector: dict[str, str]) -> None:
        """Kubeflow Trainer and JobSet as the stack installs them (the Trainer chart with the stack's
        values, JobSet its subchart, CRDs included), each manager reading its chart's config with
        the harness's webhook address and certificates (its own certificate management off)."""
        namespace = "kubeflow-system"
        version = pinned("trainer", "github.com/kubeflow/trainer/v2").lstrip("v")
        objs = helm_template(
            charts_dir() / f"kubeflow-trainer-{version}",
            "kubeflow-trainer",
            namespace,
            trainer_values(system_selector, install_jobset=True),
            crds=True,
        )
        trainer_port, jobset_port = unused_port(), unused_port()
        for o in objs:
            if o["kind"] in WEBHOOK_KINDS:
                jobset = o["metadata"]["name"].startswith("jobset-")
                point_webhooks(o, jobset_port if jobset else trainer_port, self.pki.ca.cert.read_bytes())
        configs = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
        self.objects.apply_all(
            _namespaced([o for o in objs if o["kind"] not in ("Job", *SKIPPED_KINDS)], namespace)
        )
        jobset_probe, trainer_probe = unused_port(), unused_port()
        certs = self._certs("jobset")
        jobset_config = _manager_config(configs["jobset-controller-config"])
        jobset_config |= _served_here(jobset_port, jobset_probe, certDir=str(certs))
        jobset_config["internalCertManagement"] = {"enable": False}
        path = self.dir / "jobset-config.yaml"
        path.write_text(yaml.safe_dump(jobset_config))
        self.processes.start(
            "jobset-controller",
            [binary("jobset-controller"), f"--config={path}", "--metrics-bind-address=0"],
            self.env,
        )
        trainer_config = _manager_config(configs["kubeflow-trainer-config"])
        trainer_config |= _served_here(trainer_port, trainer_probe)
        trainer_config["certManagement"] = {"enable": False}
        path = self.dir / "trainer-config.yaml"
        path.write_text(yaml.safe_dump(trainer_config))
        # Its webhook server reads controller-runtime's default folder under the temporary
        # directory: a private one per harness.
        tmp = self.dir / "trainer-tmp"
        served = tmp / "k8s-webhook-server" / "serving-certs"
        served.mkdir(parents=True, exist_ok=True)
        certs = self._certs("trainer")
        for name in ("tls.crt", "tls.key"):
            shutil.copy(certs / name, served / name)
        self.processes.start(
            "trainer-controller-manager",
            [binary("trainer-controller-manager"), f"--config={path}"],
            {**self.env, "TMPDIR": str(tmp)},
        )
        self._wait_ready("jobset-controller", jobset_probe)
        self._wait_ready("trainer-controller-manager", trainer_probe)


def _served_here(port: int, probe: int, **webhook: str) -> dict:
    """What a controller-runtime manager's config file changes to run here: its webhooks on `port` of
    127.0.0.1, its readiness on `probe`, no leader election, no metrics server."""
    return {
        "webhook": {"port": port, "host": "127.0.0.1", **webhook},
        "leaderElection": {"leaderElect": False},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"},
    }


def _secret(name: str, namespace: str, data: dict[str, bytes]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def _managing(values: dict, frameworks: tuple[str, ...] | None) -> dict:
    """Kueue's chart values with its Configuration's integrations.frameworks set to `frameworks`
    (None: as they are). The chart takes the Configuration as one string (managerConfig)."""
    if frameworks is None:
        return values
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    config["integrations"]["frameworks"] = list(frameworks)
    values["managerConfig"]["controllerManagerConfigYaml"] = yaml.safe_dump(config, sort_keys=False)
    return values


def _manager_config(config_map: dict) -> dict:
    return yaml.safe_load(config_map["data"]["controller_manager_config.yaml"])
