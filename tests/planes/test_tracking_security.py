"""The stack's MLflow server keeps its data to itself: basic auth with credentials the stack
generates (read back with MLflow's own config reader), handed to jobs as a Secret; its database
password in no command line; its in-cluster database kept in a protected stack; its image built
by the stack, with nothing installed at run time."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from support.plans import plan

from components.image import TRAINING_TARGET
from components.tracking import (
    ADMIN_USER,
    AUTH_DIR,
    AUTH_FILE,
    DATABASE_SELECTOR,
    MLFLOW_IMAGE,
    PORT,
    SERVER_SELECTOR,
)
from offline.engine import SECRET_MASK
from offline.plan import manifest_of
from planes.tracking import SERVER_CONTEXT

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
STATEFULSET = "kubernetes:apps/v1:StatefulSet"
SECRET = "kubernetes:core/v1:Secret"
PASSWORD = "random:index/randomPassword:RandomPassword"
JOBS = [{"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "gpu"}]


@pytest.fixture(scope="module")
def dev():
    return plan("dev", tracking={"mode": "server"}, jobs=JOBS)


@pytest.fixture(scope="module")
def protected():
    return plan("prod", tracking={"mode": "server", "server": {"database": "in-cluster"}})


def server(run) -> dict:
    (container,) = run.one(DEPLOYMENT, "tracking-server").inputs["spec"]["template"]["spec"]["containers"]
    return container


def revealed(run, name: str) -> dict:
    return run.one(SECRET, name).revealed["stringData"]


def auth_module(name: str):
    """A module of mlflow/server/auth, loaded by its file: the package itself imports Flask-WTF
    (mlflow[auth]), which the server's image has and the test environment does not."""
    mlflow = pytest.importorskip("mlflow")
    path = Path(mlflow.__file__).parent / "server" / "auth" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"mlflow_auth_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_auth_config_reads_back_with_mlflows_reader(dev, tmp_path, monkeypatch):
    """mlflow/server/auth/config.py read_auth_config, on the file the server mounts."""
    read_auth_config = auth_module("config").read_auth_config
    get_permission = auth_module("permissions").get_permission

    auth = revealed(dev, "tracking-auth")
    (tmp_path / AUTH_FILE).write_text(auth[AUTH_FILE])
    monkeypatch.setenv("MLFLOW_AUTH_CONFIG_PATH", str(tmp_path / AUTH_FILE))
    for name in ("MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    config = read_auth_config()
    db_password = revealed(dev, "tracking-db")["password"]
    assert config.database_uri == (
        f"postgresql://mlflow:{db_password}@mlflow-postgres.mlflow.svc.cluster.local:5432/mlflow"
    )
    assert config.admin_username == ADMIN_USER
    assert config.admin_password is None  # from the environment, on the first start
    assert get_permission(config.default_permission).can_read is False
    assert config.authorization_function == "mlflow.server.auth:authenticate_request_basic_auth"


def test_the_server_runs_the_basic_auth_app_with_its_secrets_from_the_environment(dev):
    pytest.importorskip("mlflow")
    from mlflow.cli import server as server_command
    from mlflow.utils.validation import _validate_password

    container = server(dev)
    env = {e["name"]: e for e in container["env"]}
    refs = {n: e["valueFrom"]["secretKeyRef"] for n, e in env.items() if "valueFrom" in e}
    assert refs["MLFLOW_AUTH_ADMIN_PASSWORD"] == {"name": "mlflow-auth", "key": "admin-password"}
    assert refs["MLFLOW_FLASK_SERVER_SECRET_KEY"] == {"name": "mlflow-auth", "key": "flask-secret-key"}
    assert env["MLFLOW_AUTH_CONFIG_PATH"]["value"] == f"{AUTH_DIR}/{AUTH_FILE}"
    (mount,) = container["volumeMounts"]
    assert (mount["mountPath"], mount["readOnly"]) == (AUTH_DIR, True)
    # What `mlflow server` reads: the app by its entry point, the store from the environment.
    options = {p.name: p for p in server_command.params}
    assert "basic-auth" in options["app_name"].type.choices
    assert "--app-name=basic-auth" in container["args"]
    assert (
        options["backend_store_uri"].envvar == "MLFLOW_BACKEND_STORE_URI"
        and "MLFLOW_BACKEND_STORE_URI" in env
    )
    # Generated, long enough for MLflow's password rule, and kept in the plan as secrets only.
    for name in ("tracking-admin-password", "tracking-db-password"):
        _validate_password("x" * dev.one(PASSWORD, name).inputs["length"])
    assert manifest_of(dev.one(SECRET, "tracking-auth"))[1]["stringData"] == SECRET_MASK


def test_no_password_in_any_spec_or_command_line(dev):
    secrets = [*revealed(dev, "tracking-db").values(), *revealed(dev, "tracking-auth").values()]
    for reg in [dev.one(DEPLOYMENT, "tracking-server"), dev.one(STATEFULSET, "tracking-postgres")]:
        text = str(reg.inputs)
        assert not [s for s in secrets if s in text]
    container = server(dev)
    assert not [a for a in [*container["command"], *container["args"]] if re.search("postgres|PASSWORD", a)]


def test_a_protected_stack_keeps_the_in_cluster_database(protected, dev):
    sts = protected.one(STATEFULSET, "tracking-postgres")
    assert sts.inputs["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    # The claim lives in the namespace: deleting the namespace would delete it.
    for reg in (sts, protected.one("kubernetes:core/v1:Namespace", "tracking-namespace")):
        assert reg.options.get("protect") is True and reg.options.get("retainOnDelete") is True
    for name in ("tracking-db-password", "tracking-admin-password"):
        assert protected.one(PASSWORD, name).options.get("protect") is True
    assert dev.one(STATEFULSET, "tracking-postgres").options.get("protect") is None


def test_network_policies_can_name_the_server_and_its_database(dev):
    spec = dev.one(DEPLOYMENT, "tracking-server").inputs["spec"]
    assert spec["template"]["metadata"]["labels"].items() >= SERVER_SELECTOR.items()
    assert (
        dev.one("kubernetes:core/v1:Service", "tracking-service").inputs["spec"]["ports"][0]["port"] == PORT
    )
    db = dev.one(STATEFULSET, "tracking-postgres").inputs["spec"]["template"]["metadata"]["labels"]
    assert db.items() >= DATABASE_SELECTOR.items()


def test_the_server_image_pins_its_base_and_every_package_with_hashes():
    dockerfile = (SERVER_CONTEXT / "Dockerfile").read_text()
    assert f"ARG BASE_IMAGE={MLFLOW_IMAGE}\n" in dockerfile
    assert f"FROM ${{BASE_IMAGE}} AS {TRAINING_TARGET}\n" in dockerfile  # the target the pipeline builds
    (install,) = [line for line in dockerfile.splitlines() if line.startswith("RUN ")]
    assert "--require-hashes" in install and "--no-deps" in install and "-r requirements.txt" in install
    requirements = (SERVER_CONTEXT / "requirements.txt").read_text()
    pins = re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\\n\s+--hash=sha256:[0-9a-f]{64}$", requirements, re.M)
    assert {name for name, _ in pins} >= {"psycopg2-binary", "boto3", "flask-wtf"}
    assert len(pins) == len([line for line in requirements.splitlines() if line and line[0] not in "# "])
    # The buildspec runs it in the image before the push.
    assert "smoke_test.py" in dockerfile and (SERVER_CONTEXT / "smoke_test.py").is_file()
