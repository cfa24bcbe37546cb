"""Gives one job its own MLflow user, with EDIT on its own experiment and nothing else.

Runs in the `mlflow` namespace as a Kubernetes Job (components/tracking_users.py), the one place
that holds the admin's credentials; the job's pods get only their own. Standard library only: it
runs in the server's image. Every step may be repeated (a replaced Job, a second `pulumi up`): what
MLflow 3.17.2's basic-auth app (mlflow/server/auth/__init__.py) answers RESOURCE_ALREADY_EXISTS to
is settled instead.
- `POST /api/2.0/mlflow/users/create` (create_user), else `PATCH /api/2.0/mlflow/users/update-password`
  (update_user_password: an admin setting another user's password needs no current password);
- `POST /api/2.0/mlflow/experiments/create`, else `GET .../experiments/get-by-name`;
- `POST /api/3.0/mlflow/users/permissions/grant` (grant_user_permission, resource_type `experiment`):
  3.17's auth API has no `experiments/permissions/create` any more.

An experiment that already exists is the job's only if no other user but an admin holds a permission
on it: any user may create experiments, and MLflow grants its creator MANAGE on one
(set_can_manage_experiment_permission), so a job could make `<experiment>/<another job>` before that
job's user exists and own it. Read with `GET /api/2.0/mlflow/users/list` (list_users) and, per user,
`GET /api/3.0/mlflow/users/permissions/list` (list_user_permissions: each grant's resource_type and
resource_pattern, the experiment's id), as the admin; such an experiment is refused with a sentence.
"""

from __future__ import annotations

import base64
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

ALREADY_EXISTS = "RESOURCE_ALREADY_EXISTS"
PERMISSION = "EDIT"  # read, log runs, metrics and artifacts in the experiment; not manage it


class Api:
    def __init__(self, uri: str, username: str, password: str):
        self.uri = uri.rstrip("/")
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: dict | None = None, query: dict | None = None) -> dict:
        """The answer's JSON; an MLflow error raises with its error code."""
        url = f"{self.uri}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as err:
            raise MlflowError(err.code, err.read().decode()) from None
        return json.loads(text) if text.strip() else {}


class Taken(Exception):
    """The job's experiment exists and another user holds a permission on it."""


class MlflowError(Exception):
    def __init__(self, status: int, body: str):
        try:
            self.code = json.loads(body).get("error_code", "")
        except ValueError:
            self.code = ""
        super().__init__(f"HTTP {status}: {body[:300]}")


def provision(api: Api, username: str, password: str, experiment: str) -> str:
    """The experiment's id, once `username` (with `password`) may edit it."""
    try:
        api.call("POST", "/api/2.0/mlflow/users/create", {"username": username, "password": password})
    except MlflowError as err:
        if err.code != ALREADY_EXISTS:
            raise
        api.call(
            "PATCH", "/api/2.0/mlflow/users/update-password", {"username": username, "password": password}
        )
    try:
        experiment_id = api.call("POST", "/api/2.0/mlflow/experiments/create", {"name": experiment})[
            "experiment_id"
        ]
    except MlflowError as err:
        if err.code != ALREADY_EXISTS:
            raise
        found = api.call(
            "GET", "/api/2.0/mlflow/experiments/get-by-name", query={"experiment_name": experiment}
        )
        experiment_id = found["experiment"]["experiment_id"]
        holders = others_on(api, experiment_id, username)
        if holders:
            raise Taken(
                f"experiment {experiment} ({experiment_id}) already exists and {', '.join(holders)} on it, so it "
                f"is not {username}'s own: another job's user made it first; delete the experiment (as the "
                "admin) or rename the job"
            ) from None
    grant = {
        "username": username,
        "resource_type": "experiment",
        "resource_id": experiment_id,
        "permission": PERMISSION,
    }
    try:
        api.call("POST", "/api/3.0/mlflow/users/permissions/grant", grant)
    except MlflowError as err:
        if err.code != ALREADY_EXISTS:
            raise
    return experiment_id


def others_on(api: Api, experiment_id: str, username: str) -> list[str]:
    """`<user> holds <PERMISSION>` for each user but admins and `username` with a grant on the experiment."""
    found = []
    for user in api.call("GET", "/api/2.0/mlflow/users/list").get("users") or []:
        if user.get("is_admin") or user["username"] == username:
            continue
        rows = api.call("GET", "/api/3.0/mlflow/users/permissions/list", query={"username": user["username"]})
        found += [
            f"{user['username']} holds {row['permission']}"
            for row in rows.get("permissions") or []
            if row.get("resource_type") == "experiment" and row.get("resource_pattern") == experiment_id
        ]
    return found


def main() -> int:
    env = os.environ
    api = Api(env["MLFLOW_URI"], env["MLFLOW_ADMIN_USERNAME"], env["MLFLOW_ADMIN_PASSWORD"])
    try:
        experiment_id = provision(api, env["JOB_USERNAME"], env["JOB_PASSWORD"], env["JOB_EXPERIMENT"])
    except (MlflowError, Taken, urllib.error.URLError, KeyError) as err:
        print(f"MLflow user {env['JOB_USERNAME']}: {err}", file=sys.stderr)
        return 1
    print(f"MLflow user {env['JOB_USERNAME']} may edit experiment {env['JOB_EXPERIMENT']} ({experiment_id})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
