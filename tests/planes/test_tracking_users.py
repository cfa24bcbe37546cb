"""Each job its own MLflow user: the provisioning script against a stand-in for MLflow 3.17.2's
basic-auth REST API (the server's auth app needs Flask-WTF, which the tests do not install), and the
stack's resources around it: the admin's password stays in the `mlflow` namespace."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from components import mlflow_user
from components.mlflow_user import Api, MlflowError, Taken, provision

ADMIN = ("admin", "s3cret")


class FakeMlflow:
    """Users, experiments and grants as mlflow/server/auth answers them: a second create of any is
    400 RESOURCE_ALREADY_EXISTS; every call needs the admin's basic auth."""

    def __init__(self):
        self.users: dict[str, str] = {}
        self.experiments: dict[str, str] = {}
        self.grants: set[tuple[str, str, str, str]] = set()
        self.calls: list[str] = []

    def caller(self, auth: str) -> str | None:
        for name, password in (ADMIN, *self.users.items()):
            if auth == "Basic " + base64.b64encode(f"{name}:{password}".encode()).decode():
                return name
        return None

    def answer(self, method: str, path: str, body: dict, auth: str) -> tuple[int, dict]:
        self.calls.append(f"{method} {urlparse(path).path}")
        caller = self.caller(auth)
        if caller is None:
            return 401, {"error_code": "UNAUTHENTICATED"}
        exists = (400, {"error_code": "RESOURCE_ALREADY_EXISTS"})
        route = urlparse(path).path
        if (method, route) == ("POST", "/api/2.0/mlflow/experiments/create"):
            if body["name"] in self.experiments:
                return exists
            self.experiments[body["name"]] = str(len(self.experiments) + 1)
            if caller != ADMIN[0]:  # set_can_manage_experiment_permission: the creator manages it
                self.grants.add((caller, "experiment", self.experiments[body["name"]], "MANAGE"))
            return 200, {"experiment_id": self.experiments[body["name"]]}
        if caller != ADMIN[0]:
            return 403, {"error_code": "PERMISSION_DENIED"}
        if (method, route) == ("GET", "/api/2.0/mlflow/users/list"):
            users = [{"username": ADMIN[0], "is_admin": True}]
            return 200, {"users": users + [{"username": u, "is_admin": False} for u in self.users]}
        if (method, route) == ("GET", "/api/3.0/mlflow/users/permissions/list"):
            name = parse_qs(urlparse(path).query)["username"][0]
            rows = [
                {"resource_type": kind, "resource_pattern": resource, "permission": permission}
                for user, kind, resource, permission in sorted(self.grants)
                if user == name
            ]
            return 200, {"is_admin": name == ADMIN[0], "permissions": rows}
        if (method, route) == ("POST", "/api/2.0/mlflow/users/create"):
            if body["username"] in self.users:
                return exists
            self.users[body["username"]] = body["password"]
            return 200, {"user": {"username": body["username"]}}
        if (method, route) == ("PATCH", "/api/2.0/mlflow/users/update-password"):
            self.users[body["username"]] = body["password"]
            return 200, {}
        if (method, route) == ("GET", "/api/2.0/mlflow/experiments/get-by-name"):
            name = parse_qs(urlparse(path).query)["experiment_name"][0]
            return 200, {"experiment": {"experiment_id": self.experiments[name], "name": name}}
        if (method, route) == ("POST", "/api/3.0/mlflow/users/permissions/grant"):
            grant = (body["username"], body["resource_type"], body["resource_id"], body["permission"])
            if grant[:3] in {g[:3] for g in self.grants}:
                return exists
            self.grants.add(grant)
            return 200, {}
        return 404, {"error_code": "ENDPOINT_NOT_FOUND"}


@pytest.fixture
def mlflow():
    fake = FakeMlflow()

    class Handler(BaseHTTPRequestHandler):
        def _serve(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            status, answer = fake.answer(self.command, self.path, body, self.headers.get("Authorization", ""))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = _serve

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    fake.uri = f"http://127.0.0.1:{server.server_port}"
    yield fake
    server.shutdown()
    server.server_close()


def test_a_job_user_may_edit_its_own_experiment_and_a_second_run_changes_nothing(mlflow):
    api = Api(mlflow.uri, *ADMIN)
    assert provision(api, "job-alpha", "pw-1", "dev/alpha") == "1"
    assert provision(api, "job-beta", "pw-2", "dev/beta") == "2"
    assert mlflow.grants == {
        ("job-alpha", "experiment", "1", "EDIT"),
        ("job-beta", "experiment", "2", "EDIT"),
    }
    # Again (a replaced Job, a new password): the password follows, nothing else is added.
    assert provision(api, "job-alpha", "pw-3", "dev/alpha") == "1"
    assert mlflow.users == {"job-alpha": "pw-3", "job-beta": "pw-2"}
    assert len(mlflow.grants) == 2
    assert mlflow.calls[-7:] == [
        "POST /api/2.0/mlflow/users/create",
        "PATCH /api/2.0/mlflow/users/update-password",
        "POST /api/2.0/mlflow/experiments/create",
        "GET /api/2.0/mlflow/experiments/get-by-name",
        "GET /api/2.0/mlflow/users/list",
        "GET /api/3.0/mlflow/users/permissions/list",  # job-beta's: no grant on alpha's experiment
        "POST /api/3.0/mlflow/users/permissions/grant",
    ]


def test_an_experiment_another_jobs_user_made_first_is_refused(mlflow):
    """Any user may create an experiment and MLflow makes its creator MANAGE it: job alpha's user
    makes `dev/beta` before beta's user exists. Beta's provisioning finds it held by alpha and stops,
    granting nothing; before, it took the experiment as it was and alpha kept MANAGE on beta's runs."""
    admin = Api(mlflow.uri, *ADMIN)
    provision(admin, "job-alpha", "pw-1", "dev/alpha")
    Api(mlflow.uri, "job-alpha", "pw-1").call(
        "POST", "/api/2.0/mlflow/experiments/create", {"name": "dev/beta"}
    )
    with pytest.raises(Taken) as err:
        provision(admin, "job-beta", "pw-2", "dev/beta")
    assert str(err.value) == (
        "experiment dev/beta (2) already exists and job-alpha holds MANAGE on it, so it is not job-beta's own: "
        "another job's user made it first; delete the experiment (as the admin) or rename the job"
    )
    assert not [g for g in mlflow.grants if g[0] == "job-beta"]


def test_any_other_error_stops_the_job(mlflow):
    with pytest.raises(MlflowError, match="HTTP 401"):
        provision(Api(mlflow.uri, "admin", "wrong"), "job-alpha", "pw", "dev/alpha")
    env = {
        "MLFLOW_URI": mlflow.uri,
        "MLFLOW_ADMIN_USERNAME": "admin",
        "MLFLOW_ADMIN_PASSWORD": "wrong",
        "JOB_USERNAME": "job-alpha",
        "JOB_PASSWORD": "pw",
        "JOB_EXPERIMENT": "dev/alpha",
    }
    script = [sys.executable, mlflow_user.__file__]
    proc = subprocess.run(script, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "MLflow user job-alpha: HTTP 401" in proc.stderr
    proc = subprocess.run(
        script, env={**env, "MLFLOW_ADMIN_PASSWORD": ADMIN[1]}, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0 and "may edit experiment dev/alpha (1)" in proc.stdout


# --- the stack's resources --------------------------------------------------------------------

SECRET = "kubernetes:core/v1:Secret"
JOB = "kubernetes:batch/v1:Job"
JOBS = [
    {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "gpu", "wait": "none"},
    {"name": "ray", "kind": "RayJob", "nodeGroup": "gpu", "wait": "none"},
]


@pytest.fixture(scope="module")
def server_plan():
    from support.plans import plan

    return plan("dev", tracking={"mode": "server"}, jobs=JOBS)


def revealed(run, name: str) -> dict:
    return run.one(SECRET, name).revealed["stringData"]


def env_of(run, job: str) -> dict:
    from offline.plan import manifest_of

    (reg,) = [r for r in run.resources if r.name == f"job-{job}" and r.custom]
    spec = manifest_of(reg)[1]["spec"]
    pod = (
        spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        if "pytorchReplicaSpecs" in spec
        else spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    )
    return {e["name"]: e for e in pod["containers"][0]["env"]}


def test_each_job_logs_as_its_own_user_to_its_own_experiment(server_plan):
    admin_password = revealed(server_plan, "tracking-auth")["admin-password"]
    for job in ("fsdp", "ray"):
        env = env_of(server_plan, job)
        for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
            assert env[key]["valueFrom"]["secretKeyRef"] == {"name": f"mlflow-credentials-{job}", "key": key}
        assert env["MLFLOW_EXPERIMENT_NAME"]["value"] == f"dev/{job}"
        credentials = revealed(server_plan, f"mlflow-credentials-{job}")
        assert credentials["MLFLOW_TRACKING_USERNAME"] == f"job-{job}"
        assert credentials["MLFLOW_TRACKING_PASSWORD"] != admin_password
        assert (
            server_plan.one(SECRET, f"mlflow-credentials-{job}").inputs["metadata"]["namespace"] == "training"
        )
        assert (
            server_plan.outputs["jobs"][job]["experiment"] == f"dev/{job}"
        )  # what `trainstack status` reads
    # The admin's password is in no Secret of the training namespace.
    for secret in server_plan.by_type(SECRET):
        if secret.inputs["metadata"].get("namespace") == "training":
            assert admin_password not in json.dumps(secret.revealed), secret.name
    assert not [
        s for s in server_plan.by_type(SECRET) if s.inputs["metadata"]["name"] == "mlflow-credentials"
    ]


def test_the_user_is_made_in_the_mlflow_namespace_off_the_path_to_training(server_plan):
    for job in ("fsdp", "ray"):
        provisioner = server_plan.one(JOB, f"tracking-users-{job}-user")
        assert provisioner.inputs["metadata"]["namespace"] == "mlflow"
        (container,) = provisioner.inputs["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["MLFLOW_ADMIN_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "mlflow-auth",
            "key": "admin-password",
        }
        assert env["JOB_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": f"mlflow-user-{job}",
            "key": "password",
        }
        assert (env["JOB_USERNAME"]["value"], env["JOB_EXPERIMENT"]["value"]) == (f"job-{job}", f"dev/{job}")
        assert container["command"] == ["python", "/opt/trainstack/mlflow_user.py"]
        assert (
            revealed(server_plan, f"tracking-users-{job}-password")["password"]
            == (revealed(server_plan, f"mlflow-credentials-{job}")["MLFLOW_TRACKING_PASSWORD"])
        )
        waits = {u.rsplit("::", 1)[1] for u in provisioner.dependencies}
        assert {"tracking-server", "tracking-users-script"} <= waits
        # The job does not wait for it (nor the server, nor RDS): the trainer opens its run once
        # the server lets it in.
        job_waits = {
            u.rsplit("::", 1)[1]
            for u in next(
                r for r in server_plan.resources if r.name == f"job-{job}" and r.custom
            ).dependencies
        }
        assert f"tracking-users-{job}-user" not in job_waits and "tracking-server" not in job_waits
    script = server_plan.one("kubernetes:core/v1:ConfigMap", "tracking-users-script").inputs["data"]
    assert script == {"mlflow_user.py": Path(mlflow_user.__file__).read_text()}
    # The tracking namespace admits the provisioning pods to the server, and no other pod of its own.
    (allow,) = [
        p
        for p in server_plan.by_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
        if p.inputs["metadata"]["name"] == "mlflow-server"
    ]
    sources = allow.inputs["spec"]["ingress"][0]["from"]
    assert {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "mlflow-users"}}} in sources


def test_the_in_cluster_database_runs_by_digest():
    from support.plans import plan

    run = plan("dev", tracking={"mode": "server", "server": {"database": "in-cluster"}})
    (container,) = run.one("kubernetes:apps/v1:StatefulSet", "tracking-postgres").inputs["spec"]["template"][
        "spec"
    ]["containers"]
    name, _, digest = container["image"].partition("@sha256:")
    assert name == "postgres:17.6" and re.fullmatch("[0-9a-f]{64}", digest)
