"""Tracking plane config: where jobs log their MLflow runs.

`mode: external` names a server the user already runs (its credentials are the secrets
`trackingToken`, or `tracking.username` with `trackingPassword`); `mode: server` runs the official
MLflow image in the cluster, its backend store in PostgreSQL (RDS, or in the cluster for dev) and
its artifacts in the stack's bucket. Off by default: jobs then print their metrics only."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from config.names import PROJECT
from config.schema import Reader, setting

KEY = f"{PROJECT}:tracking"
EXPERIMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._/-]{0,199}")
# A SageMaker managed MLflow tracking server, which the image's sagemaker-mlflow plugin reaches with
# the pod's AWS identity, signing for the service sagemaker-mlflow (its auth_provider.py; an
# mlflow-app signs for `sagemaker`, whose actions the jobs' roles are not given).
SAGEMAKER_MLFLOW_ARN = re.compile(r"arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:[0-9]{12}:mlflow-tracking-server/\S+")
# `scheme://userinfo@host...`: credentials written into the URI itself.
USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#\s]*)@")
# RDS instance classes a tracking server's PostgreSQL runs on (one small server per stack).
RDS_CLASSES = ("db.t4g.micro", "db.t4g.small", "db.t4g.medium", "db.m7g.large")


@dataclass(frozen=True)
class TrackingServerConfig:
    database: Literal["in-cluster", "rds"] = setting(
        "database",
        "The backend store: `in-cluster` (PostgreSQL on an EBS volume in the cluster, for dev) or `rds` "
        "(RDS PostgreSQL in the private subnets, encrypted, protected with storage.protect).",
        "in-cluster",
    )
    instance_class: str = setting(
        "instanceClass", f"RDS instance class: {', '.join(RDS_CLASSES)}.", RDS_CLASSES[0]
    )
    storage_gib: int = setting("storageGiB", "The database volume, GiB (20-1000).", 20)


@dataclass(frozen=True)
class TrackingConfig:
    mode: Literal["none", "external", "server"] = setting(
        "mode", "`none`, `external` (a server at `uri`) or `server` (one the stack runs).", "none"
    )
    uri: str = setting(
        "uri",
        "An existing MLflow server's URI (mode external): https://, or http:// without credentials; "
        "never user:password@ (use username and trackingPassword). Or a SageMaker managed MLflow "
        "tracking server's ARN: the jobs' roles may then use it (sagemaker-mlflow:*), and the image's "
        "sagemaker-mlflow plugin signs each call with the pod's identity.",
        "",
    )
    username: str = setting(
        "username", "Basic-auth user for the external server (with trackingPassword).", ""
    )
    experiment: str = setting(
        "experiment", "The MLflow experiment every job logs to (default: the stack name).", ""
    )
    server: TrackingServerConfig = setting(
        "server", "The server the stack runs (mode server).", factory=TrackingServerConfig
    )

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    @property
    def sagemaker_arn(self) -> str | None:
        """The SageMaker managed MLflow resource `uri` names, if it names one."""
        return self.uri if self.mode == "external" and SAGEMAKER_MLFLOW_ARN.fullmatch(self.uri) else None

    def experiment_name(self, stack: str) -> str:
        return self.experiment or stack


def check_tracking(t: TrackingConfig, has_token: bool, has_password: bool, existing: bool, r: Reader) -> None:
    # Every message shows the URI without credentials written into it.
    shown_uri = USERINFO.sub(r"\g<scheme>(credentials)@", t.uri, count=1)
    if shown_uri != t.uri:
        # The URI is a plain value: in the jobs' pod env, the manifests, the state and the
        # trackingUri output.
        r.problem(
            f"{KEY}.uri",
            shown_uri,
            "credentials in the URI would be stored and handed to every pod in clear",
            "the URI without user:password@, and tracking.username with the secret trackingPassword",
        )
    elif t.sagemaker_arn and (has_token or has_password or t.username):
        given = "trackingToken" if has_token else "trackingPassword" if has_password else "tracking.username"
        r.problem(
            f"{KEY}.uri",
            t.uri,
            f"SageMaker's MLflow signs each call with the pod's AWS identity, not {given}",
            f"the ARN without {given}",
        )
    elif t.mode == "external" and not t.sagemaker_arn and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", t.uri):
        r.problem(
            f"{KEY}.uri",
            t.uri or None,
            "mode external needs the server's URI",
            "https://mlflow.example.com, or a SageMaker MLflow ARN "
            "(arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name>)",
        )
    elif t.mode == "external" and t.uri.startswith("http://") and (has_token or has_password):
        secret = "trackingToken" if has_token else "trackingPassword"
        r.problem(
            f"{KEY}.uri",
            t.uri,
            f"{secret} would be sent in clear over http://",
            "an https:// URI (credentials only over TLS), or no credentials",
        )
    if t.mode != "external":
        for key, value in (("uri", shown_uri), ("username", t.username)):
            if value:
                r.problem(
                    f"{KEY}.{key}", value, f"only read with mode external (mode is {t.mode})", "remove it"
                )
        for key, present in (("trackingToken", has_token), ("trackingPassword", has_password)):
            if present:
                r.problem(
                    f"{PROJECT}:{key}",
                    "(secret)",
                    f"only read with mode external (mode is {t.mode})",
                    "remove it",
                )
    if has_password and not t.username:
        r.problem(
            f"{KEY}.username", None, "trackingPassword is set without a user", "the basic-auth user name"
        )
    if has_token and has_password:
        r.problem(f"{PROJECT}:trackingToken", "(secret)", "set with trackingPassword", "one of the two")
    if t.experiment and not EXPERIMENT.fullmatch(t.experiment):
        r.problem(
            f"{KEY}.experiment", t.experiment, "not an experiment name", "letters, digits, space . _ / -"
        )
    if t.mode == "server":
        if existing:
            r.problem(
                f"{KEY}.mode",
                t.mode,
                "a tracking server needs the stack's own cluster (its database, bucket and identities)",
                "external (your server's URI), or none",
            )
        if t.server.instance_class not in RDS_CLASSES:
            r.problem(
                f"{KEY}.server.instanceClass", t.server.instance_class, "not offered", ", ".join(RDS_CLASSES)
            )
        r.ranges(f"{KEY}.server", (("storageGiB", t.server.storage_gib, 20, 1000),))
