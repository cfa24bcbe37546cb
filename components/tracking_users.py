"""Each job its own MLflow user on the stack's MLflow server, with EDIT on its own experiment only.

The admin's credentials never leave the `mlflow` namespace: a Kubernetes Job there, which holds them,
creates the job's user through MLflow's auth API (components/mlflow_user.py, run with the server's
image) from a password the stack generates. The job's pods read only their own user's credentials,
from a Secret in their own namespace: one job can neither delete another's runs nor the admin's
password, and what it logs lands in `<experiment>/<job>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from components import mlflow_user
from conventions import PART_OF, TRACKING_NAMESPACE

SCRIPT = Path(mlflow_user.__file__)
SCRIPT_DIR = "/opt/trainstack"
# The provisioning pods, which the tracking namespace's NetworkPolicies admit to the server.
PROVISIONER_SELECTOR = {"app.kubernetes.io/name": "mlflow-users"}


def job_username(job: str) -> str:
    return f"job-{job}"


def job_experiment(experiment: str, job: str) -> str:
    """A job's own experiment: MLflow permissions are per experiment, so jobs cannot share one."""
    return f"{experiment}/{job}"


@dataclass(frozen=True)
class TrackingUsersArgs:
    provider: k8s.Provider
    uri: str
    image: pulumi.Input[str]  # the server's: Python, nothing to install
    admin_secret: str  # in the tracking namespace, key `admin-password`
    admin_username: str
    system_selector: dict[str, str]


class TrackingUsers(pulumi.ComponentResource):
    """The provisioning script as a ConfigMap; `job_user` adds one job's user."""

    def __init__(self, name: str, args: TrackingUsersArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:tracking:TrackingUsers", name, None, opts)
        self._name, self._args = name, args
        self._k8s = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.script = k8s.core.v1.ConfigMap(
            f"{name}-script",
            metadata={"name": "mlflow-users", "namespace": TRACKING_NAMESPACE, "labels": PART_OF},
            data={SCRIPT.name: SCRIPT.read_text()},
            opts=self._k8s,
        )
        self.register_outputs({})

    def job_user(
        self, job: str, experiment: str, waits_for: list[pulumi.Resource]
    ) -> tuple[dict[str, pulumi.Input[str]], k8s.batch.v1.Job]:
        """The job's credentials (for a Secret in its own namespace) and the Job that creates its
        user, which the job's pods wait for; it waits for `waits_for` (the server running, the
        policies that admit it)."""
        args, name = self._args, f"{self._name}-{job}"
        password = random.RandomPassword(f"{name}-password", length=32, special=False, opts=self._k8s)
        secret = k8s.core.v1.Secret(
            f"{name}-password",
            metadata={"name": f"mlflow-user-{job}", "namespace": TRACKING_NAMESPACE, "labels": PART_OF},
            string_data={"password": password.result},
            opts=self._k8s,
        )

        def from_secret(var: str, secret_name: pulumi.Input[str], key: str) -> dict:
            return {"name": var, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}}

        provisioner = k8s.batch.v1.Job(
            f"{name}-user",
            metadata={"name": f"mlflow-user-{job}", "namespace": TRACKING_NAMESPACE, "labels": PART_OF},
            spec={
                "backoffLimit": 6,  # the server may still be starting
                "template": {
                    "metadata": {"labels": {**PART_OF, **PROVISIONER_SELECTOR}},
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": dict(args.system_selector),
                        "automountServiceAccountToken": False,  # it talks to MLflow only
                        "containers": [
                            {
                                "name": "mlflow-user",
                                "image": args.image,
                                "command": ["python", f"{SCRIPT_DIR}/{SCRIPT.name}"],
                                "env": [
                                    {"name": "MLFLOW_URI", "value": args.uri},
                                    {"name": "MLFLOW_ADMIN_USERNAME", "value": args.admin_username},
                                    from_secret("MLFLOW_ADMIN_PASSWORD", args.admin_secret, "admin-password"),
                                    {"name": "JOB_USERNAME", "value": job_username(job)},
                                    from_secret("JOB_PASSWORD", secret.metadata["name"], "password"),
                                    {"name": "JOB_EXPERIMENT", "value": experiment},
                                ],
                                "resources": {
                                    "requests": {"cpu": "50m", "memory": "128Mi"},
                                    "limits": {"memory": "128Mi"},
                                },
                                "volumeMounts": [
                                    {"name": "script", "mountPath": SCRIPT_DIR, "readOnly": True}
                                ],
                            }
                        ],
                        "volumes": [{"name": "script", "configMap": {"name": self.script.metadata["name"]}}],
                    },
                },
            },
            opts=pulumi.ResourceOptions.merge(
                self._k8s, pulumi.ResourceOptions(depends_on=[self.script, secret, *waits_for])
            ),
        )
        credentials = {
            "MLFLOW_TRACKING_USERNAME": job_username(job),
            "MLFLOW_TRACKING_PASSWORD": password.result,
        }
        return credentials, provisioner
