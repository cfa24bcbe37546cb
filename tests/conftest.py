"""Shared helpers: run the real program under the mock engine with a stack file plus overrides."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from offline.engine import PlanRun, run_program  # noqa: E402
from offline.plan import read_stack_file  # noqa: E402


def shared_dir(kind: str, env_var: str) -> Path:
    """An upstream folder of ../shared (charts, crds), or the path in `env_var`; skip without it.
    Upstream files are read from there, never copied into the project."""
    import os

    path = Path(os.environ.get(env_var) or ROOT.parent / "shared" / kind)
    if not path.is_dir():
        pytest.skip(f"upstream {kind} not found at {path} (set {env_var} to a copy of shared/{kind})")
    return path


CRD_FILES = {
    "PyTorchJob": "kubeflow.org_pytorchjobs.yaml",
    "RayJob": "ray.io_rayjobs.yaml",
    "RayCluster": "ray.io_rayclusters.yaml",
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "AdmissionCheck": "kueue.x-k8s.io_admissionchecks.yaml",
    "ProvisioningRequestConfig": "kueue.x-k8s.io_provisioningrequestconfigs.yaml",
    "Workload": "kueue.x-k8s.io_workloads.yaml",
    "ProvisioningRequest": "autoscaling.x-k8s.io_provisioningrequests.yaml",
}


def strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused: the API server prunes them silently, so a
    misspelt field would be dropped and the job would run without it. Go's regexps take inline
    flags after `^` (`^(?i)...`); Python's only at the start, where they mean the same."""
    if isinstance(schema, dict):
        schema = {k: strict(v) for k, v in schema.items()}
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and pattern.startswith("^(?i)"):
            schema["pattern"] = "(?i)^" + pattern.removeprefix("^(?i)")
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        return schema
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    return schema


@functools.cache
def crd_validator(kind: str, api_version: str) -> jsonschema.Draft7Validator:
    """The schema of `kind` at the version the manifest names (it must be served)."""
    path = shared_dir("crds", "TRAINSTACK_CRDS_DIR") / CRD_FILES[kind]
    crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    group, _, version = api_version.rpartition("/")
    assert crd["spec"]["group"] == group, f"{kind}: {api_version} is not {crd['spec']['group']}"
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version and v["served"]]
    return jsonschema.Draft7Validator(strict(found["schema"]["openAPIV3Schema"]))


def crd_errors(manifest: dict) -> list[str]:
    return [
        f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
        for e in crd_validator(manifest["kind"], manifest["apiVersion"]).iter_errors(manifest)
    ]


def unused_port() -> int:
    """A loopback port nothing listens on right now (closed again before it is returned)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stack_values(stack: str, **overrides) -> dict[str, str]:
    """The stack file's config, with `trainstack:<key>` overrides given as Python values."""
    values, _ = read_stack_file(ROOT / f"Pulumi.{stack}.yaml")
    for key, value in overrides.items():
        full = key if ":" in key else f"trainstack:{key}"
        values[full] = value if isinstance(value, str) else json.dumps(value)
    return values


def plan(stack: str = "dev", facts: dict | None = None, **overrides) -> PlanRun:
    """The offline plan of `stack` with config overrides; `facts` change what the account answers."""
    return run_program(stack, stack_values(stack, **overrides), facts=facts)


def policy_of(run: PlanRun, name: str) -> dict:
    return json.loads(run.one("aws:iam/rolePolicy:RolePolicy", name).inputs["policy"])


@pytest.fixture(scope="session")
def dev_plan() -> PlanRun:
    return plan("dev")


@pytest.fixture(scope="session")
def prod_plan() -> PlanRun:
    return plan("prod")


@pytest.fixture
def moto_server(monkeypatch):
    """An S3 endpoint on loopback (moto's server) for processes the test starts, with bucket `ckpt`."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    boto3.client("s3").create_bucket(Bucket="ckpt")
    yield env
    server.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Real training runs first, longest first (`slow(seconds=...)`): on two workers (`make test`)
    they start at once and the many short tests fill in beside them, instead of one long run
    starting last."""

    def weight(item: pytest.Item) -> float:
        slow = item.get_closest_marker("slow")
        return -slow.kwargs.get("seconds", 10) if slow else 0

    items.sort(key=weight)
