"""An MLflow tracking server in the cluster: the official image at a pinned version on the system
nodes, its backend store in PostgreSQL, its artifacts in the stack's bucket, and no public endpoint.

- **Image.** `ghcr.io/mlflow/mlflow` carries neither PostgreSQL's driver nor boto3 (mlflow/mlflow
  #9513, #8342): the stack builds `images/mlflow` (the official image plus both, pinned) with its
  own image pipeline and runs it by digest. Nothing is installed when the server starts.
- **Authentication.** MLflow's basic-auth app (`--app-name basic-auth`, mlflow/server/auth): its
  users in the same PostgreSQL database (their own `alembic_version_auth` table), an admin whose
  password the stack generates, handed to jobs as a Secret; no other user has any permission.
  Only `/health` and static files answer without credentials (`_UNPROTECTED_PATH_PREFIXES`).
- **Artifacts.** The server proxies them (`--artifacts-destination s3://<bucket>/mlflow/`), with a
  Pod Identity that may touch only that prefix: jobs need no access of their own for artifacts.
- **Database.** `rds`: PostgreSQL 17 in the private subnets, encrypted, reachable only from the
  cluster's security group, with deletion protection, retention and a final snapshot in protected
  stacks. `in-cluster` (dev): a PostgreSQL StatefulSet on an encrypted gp3 volume (the EBS CSI
  add-on with its own Pod Identity); the volume is retained when the claim goes, and in protected
  stacks the StatefulSet and its namespace (where the claim lives) are protected and retained too.
  The password is generated once and kept in the state as a secret; it reaches the server through
  its environment and a mounted file, never its command line (`/proc/<pid>/cmdline` is readable by
  every user on the node).
- **Reaching it.** A ClusterIP Service: jobs use its cluster DNS name; people port-forward.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pulumi_random as random

from components.bucket import ArtifactBucket
from components.pod_identity import EksAccess, pod_identity
from config.tracking import TrackingServerConfig
from conventions import PART_OF, TRACKING_NAMESPACE
from domain.network import PrivateNetwork

MLFLOW_VERSION = "3.17.2"  # requirements-test.txt runs the same server in the tests
# The base of images/mlflow (its Dockerfile's BASE_IMAGE default agrees; a test holds them equal).
MLFLOW_IMAGE = f"ghcr.io/mlflow/mlflow:v{MLFLOW_VERSION}"
POSTGRES_MAJOR = "17"  # RDS takes the newest 17.x and its minor upgrades; no drift between runs
# Docker's official image, for the in-cluster store, by digest: a tag can be pushed again. The digest
# is the one several public projects pin for 17.6 (server_version_num 170006); not read from Docker
# Hub here (out of reach), so a wrong one fails the pull, never runs something else.
POSTGRES_IMAGE = "postgres:17.6@sha256:00bc86618629af00d2937fdc5a5d63db3ff8450acf52f0636ec813c7f4902929"
PORT = 5000
NAME = "mlflow"
ARTIFACT_PREFIX = "mlflow/"
DATABASE = "mlflow"
DB_USER = "mlflow"
DB_PORT = 5432
ADMIN_USER = "admin"
# The pods' labels, for the Services here and the tracking namespace's NetworkPolicies.
SERVER_SELECTOR = {"app.kubernetes.io/name": NAME}
DATABASE_SELECTOR = {"app.kubernetes.io/name": f"{NAME}-postgres"}
AUTH_DIR = "/etc/mlflow-auth"
AUTH_FILE = "basic_auth.ini"
EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"
EBS_CSI_POLICY = "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
SERVICE_HOST = f"{NAME}.{TRACKING_NAMESPACE}.svc.cluster.local"
TRACKING_URI = f"http://{SERVICE_HOST}:{PORT}"
PORT_FORWARD = f"kubectl -n {TRACKING_NAMESPACE} port-forward svc/{NAME} {PORT}:{PORT}"
# Host headers the server answers (MLflow refuses others): the Service's names, and a port-forward.
ALLOWED_HOSTS = ",".join(
    [
        f"{h}:{PORT}"
        for h in (SERVICE_HOST, f"{NAME}.{TRACKING_NAMESPACE}.svc", f"{NAME}.{TRACKING_NAMESPACE}")
    ]
    + ["localhost:*", "127.0.0.1:*"]
)


@dataclass(frozen=True)
class TrackingServerArgs:
    provider: k8s.Provider
    image: pulumi.Input[str]  # images/mlflow as the stack built it, by digest
    eks: EksAccess
    system_selector: dict[str, str]
    system_nodes: pulumi.Resource | None
    bucket: ArtifactBucket
    database: TrackingServerConfig
    network: PrivateNetwork[pulumi.Input[str]]  # where its RDS database goes
    protect: bool


def artifact_policy(bucket_arn: str, kms_key_arn: str | None) -> dict:
    """The server's artifacts: objects under mlflow/ only."""
    statements = [
        {
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": bucket_arn,
            "Condition": {"StringLike": {"s3:prefix": [f"{ARTIFACT_PREFIX}*"]}},
        },
        {
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject"],
            "Resource": f"{bucket_arn}/{ARTIFACT_PREFIX}*",
        },
    ]
    if kms_key_arn:
        statements.append(
            {"Effect": "Allow", "Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Resource": kms_key_arn}
        )
    return {"Version": "2012-10-17", "Statement": statements}


def auth_config(database_uri: str) -> str:
    """MLflow's basic-auth config (the keys of mlflow/server/auth/basic_auth.ini, read by
    mlflow/server/auth/config.py read_auth_config): users in the tracking database, the admin
    created at the first start with MLFLOW_AUTH_ADMIN_PASSWORD, and no permission for anyone else."""
    return "\n".join(
        [
            "[mlflow]",
            "default_permission = NO_PERMISSIONS",
            f"database_uri = {database_uri}",
            f"admin_username = {ADMIN_USER}",
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth",
            "grant_default_workspace_access = false",
            "",
        ]
    )


class TrackingServer(pulumi.ComponentResource):
    def __init__(self, name: str, args: TrackingServerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:tracking:TrackingServer", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)
        kept = pulumi.ResourceOptions(protect=args.protect, retain_on_delete=args.protect)
        in_cluster = args.database.database == "in-cluster"
        # An in-cluster database's claim lives in the namespace: deleting it would delete the claim.
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": TRACKING_NAMESPACE, "labels": PART_OF},
            opts=pulumi.ResourceOptions.merge(k8s_opts, kept) if in_cluster else k8s_opts,
        )
        # What the tracking namespace's NetworkPolicies name: the server and its database.
        self.namespace_name = TRACKING_NAMESPACE
        self.server_selector = dict(SERVER_SELECTOR)
        self.port = PORT
        self.database_selector = dict(DATABASE_SELECTOR) if in_cluster else None
        self.database_port = DB_PORT
        in_namespace = pulumi.ResourceOptions.merge(
            k8s_opts, pulumi.ResourceOptions(depends_on=[self.namespace])
        )
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-service-account",
            metadata={"name": NAME, "namespace": TRACKING_NAMESPACE, "labels": PART_OF},
            opts=in_namespace,
        )
        bucket = args.bucket
        policy = pulumi.Output.all(bucket.arn, bucket.kms_key.arn if bucket.kms_key else None).apply(
            lambda a: json.dumps(artifact_policy(*a))
        )
        _, _, self.association = pod_identity(
            name,
            "MLflow tracking server of trainstack (EKS Pod Identity): artifacts under mlflow/",
            policy,
            args.eks,
            TRACKING_NAMESPACE,
            NAME,
            child,
        )
        # Generated once; URL-safe, since it goes into the backend store URI. Protected with the
        # database it opens.
        self.password = random.RandomPassword(
            f"{name}-db-password",
            length=32,
            special=False,
            opts=pulumi.ResourceOptions(parent=self, protect=args.protect),
        )
        self.db_secret = k8s.core.v1.Secret(
            f"{name}-db",
            metadata={"name": f"{NAME}-db", "namespace": TRACKING_NAMESPACE, "labels": PART_OF},
            string_data={"password": self.password.result},
            opts=in_namespace,
        )
        if in_cluster:
            self.database_host, database = self._in_cluster(name, args, in_namespace, kept)
        else:
            self.database_host, database = self._rds(name, args, pulumi.ResourceOptions.merge(child, kept))
        self.auth_secret = self._auth(name, args, in_namespace)

        labels = {**PART_OF, **SERVER_SELECTOR}
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-server",
            metadata={"name": NAME, "namespace": TRACKING_NAMESPACE, "labels": labels},
            spec={
                "replicas": 1,
                "selector": {"matchLabels": dict(SERVER_SELECTOR)},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": NAME,
                        "nodeSelector": dict(args.system_selector),
                        "containers": [
                            {
                                "name": NAME,
                                "image": args.image,
                                "command": ["mlflow", "server"],
                                "args": [
                                    "--app-name=basic-auth",
                                    "--host=0.0.0.0",
                                    f"--port={PORT}",
                                    "--workers=2",
                                    pulumi.Output.concat(
                                        "--artifacts-destination=s3://",
                                        bucket.bucket_name,
                                        f"/{ARTIFACT_PREFIX}",
                                    ),
                                ],
                                "env": self._server_env(),
                                "ports": [{"name": "http", "containerPort": PORT}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/health", "port": PORT},
                                    "periodSeconds": 10,
                                },
                                "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}},
                                "volumeMounts": [{"name": "auth", "mountPath": AUTH_DIR, "readOnly": True}],
                            }
                        ],
                        "volumes": [
                            {
                                "name": "auth",
                                "secret": {
                                    "secretName": self.auth_secret.metadata["name"],
                                    "items": [{"key": AUTH_FILE, "path": AUTH_FILE}],
                                    "defaultMode": 0o440,
                                },
                            }
                        ],
                    },
                },
            },
            opts=pulumi.ResourceOptions.merge(
                in_namespace,
                pulumi.ResourceOptions(
                    depends_on=[
                        self.association,
                        database,
                        *([args.system_nodes] if args.system_nodes else []),
                    ]
                ),
            ),
        )
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata={"name": NAME, "namespace": TRACKING_NAMESPACE, "labels": labels},
            spec={
                "selector": dict(SERVER_SELECTOR),
                "ports": [{"name": "http", "port": PORT, "targetPort": PORT}],
            },
            opts=in_namespace,
        )
        self.uri = TRACKING_URI
        self.register_outputs({"uri": TRACKING_URI, "portForward": PORT_FORWARD})

    def _auth(self, name: str, args: TrackingServerArgs, opts: pulumi.ResourceOptions) -> k8s.core.v1.Secret:
        """The admin's password (jobs get it too), the CSRF key of the basic-auth app (mlflow/server/
        auth get_flask_server_secret_key refuses to start without one) and the auth config, whose
        database URI carries the database password: a file from a Secret, not an argument."""
        generated = pulumi.ResourceOptions(parent=self, protect=args.protect)
        self.admin_password = random.RandomPassword(
            f"{name}-admin-password", length=32, special=False, opts=generated
        )
        flask_key = random.RandomPassword(
            f"{name}-flask-secret-key", length=48, special=False, opts=generated
        )
        config = pulumi.Output.concat(
            f"postgresql://{DB_USER}:",
            self.password.result,
            "@",
            self.database_host,
            f":{DB_PORT}/{DATABASE}",
        ).apply(auth_config)
        return k8s.core.v1.Secret(
            f"{name}-auth",
            metadata={"name": f"{NAME}-auth", "namespace": TRACKING_NAMESPACE, "labels": PART_OF},
            string_data={
                "admin-password": self.admin_password.result,
                "flask-secret-key": flask_key.result,
                AUTH_FILE: pulumi.Output.secret(config),
            },
            opts=opts,
        )

    def _server_env(self) -> list[dict[str, Any]]:
        """The backend store URI through the environment (`mlflow server --backend-store-uri` reads
        MLFLOW_BACKEND_STORE_URI, mlflow/cli/__init__.py, and hands its workers the store through
        their environment too, mlflow/server/__init__.py _run_server): Kubernetes expands
        $(DB_PASSWORD) from the variable before it (EnvVar.value), so the password is in neither the
        spec nor a command line."""
        return [
            {"name": "MLFLOW_SERVER_ALLOWED_HOSTS", "value": ALLOWED_HOSTS},
            self._secret_env("DB_PASSWORD", self.db_secret, "password"),
            {
                "name": "MLFLOW_BACKEND_STORE_URI",
                "value": pulumi.Output.concat(
                    f"postgresql://{DB_USER}:$(DB_PASSWORD)@", self.database_host, f":{DB_PORT}/{DATABASE}"
                ),
            },
            {"name": "MLFLOW_AUTH_CONFIG_PATH", "value": f"{AUTH_DIR}/{AUTH_FILE}"},
            self._secret_env("MLFLOW_AUTH_ADMIN_PASSWORD", self.auth_secret, "admin-password"),
            self._secret_env("MLFLOW_FLASK_SERVER_SECRET_KEY", self.auth_secret, "flask-secret-key"),
        ]

    @staticmethod
    def _secret_env(name: str, secret: k8s.core.v1.Secret, key: str) -> dict[str, Any]:
        return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret.metadata["name"], "key": key}}}

    def _rds(
        self, name: str, args: TrackingServerArgs, opts: pulumi.ResourceOptions
    ) -> tuple[pulumi.Output[str], pulumi.Resource]:
        net = args.network
        subnets = aws.rds.SubnetGroup(f"{name}-db-subnets", subnet_ids=net.private_subnet_ids, opts=opts)
        security_group = aws.ec2.SecurityGroup(
            f"{name}-db-sg",
            description="MLflow's PostgreSQL: from the cluster only",
            vpc_id=net.vpc_id,
            ingress=[
                {
                    "protocol": "tcp",
                    "from_port": DB_PORT,
                    "to_port": DB_PORT,
                    "security_groups": [net.cluster_security_group_id],
                }
            ],
            opts=opts,
        )
        self.db_instance = aws.rds.Instance(
            f"{name}-db",
            engine="postgres",
            engine_version=POSTGRES_MAJOR,
            auto_minor_version_upgrade=True,
            instance_class=args.database.instance_class,
            allocated_storage=args.database.storage_gib,
            storage_type="gp3",
            storage_encrypted=True,
            db_name=DATABASE,
            username=DB_USER,
            password=self.password.result,
            db_subnet_group_name=subnets.name,
            vpc_security_group_ids=[security_group.id],
            publicly_accessible=False,
            backup_retention_period=7,
            deletion_protection=args.protect,
            skip_final_snapshot=not args.protect,
            final_snapshot_identifier=f"{name}-db-final" if args.protect else None,
            opts=opts,
        )
        return self.db_instance.address, self.db_instance

    def _in_cluster(
        self, name: str, args: TrackingServerArgs, opts: pulumi.ResourceOptions, kept: pulumi.ResourceOptions
    ) -> tuple[pulumi.Output[str], pulumi.Resource]:
        _, _, association = pod_identity(
            f"{name}-ebs-csi",
            "EBS CSI driver of trainstack (EKS Pod Identity)",
            None,
            args.eks,
            "kube-system",
            EBS_CSI_SERVICE_ACCOUNT,
            pulumi.ResourceOptions(parent=self),
            managed_policy_arn=EBS_CSI_POLICY,
        )
        self.ebs_csi = aws.eks.Addon(
            f"{name}-ebs-csi-driver",
            cluster_name=args.eks.cluster_name,
            addon_name="aws-ebs-csi-driver",
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[association, *([args.system_nodes] if args.system_nodes else [])]
            ),
        )
        storage_class = k8s.storage.v1.StorageClass(
            f"{name}-gp3",
            metadata={"name": f"{NAME}-gp3", "labels": PART_OF},
            provisioner="ebs.csi.aws.com",
            parameters={"type": "gp3", "encrypted": "true"},
            reclaim_policy="Retain",  # the runs outlive a deleted claim
            volume_binding_mode="WaitForFirstConsumer",
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[self.ebs_csi])),
        )
        labels = {**PART_OF, **DATABASE_SELECTOR}
        self.postgres = k8s.apps.v1.StatefulSet(
            f"{name}-postgres",
            metadata={"name": f"{NAME}-postgres", "namespace": TRACKING_NAMESPACE, "labels": labels},
            spec={
                "serviceName": f"{NAME}-postgres",
                "replicas": 1,
                "selector": {"matchLabels": dict(DATABASE_SELECTOR)},
                # The claim outlives the StatefulSet (as its volume outlives the claim: Retain).
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": dict(args.system_selector),
                        "containers": [
                            {
                                "name": "postgres",
                                "image": POSTGRES_IMAGE,
                                "env": [
                                    {"name": "POSTGRES_DB", "value": DATABASE},
                                    {"name": "POSTGRES_USER", "value": DB_USER},
                                    self._secret_env("POSTGRES_PASSWORD", self.db_secret, "password"),
                                    {"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"},
                                ],
                                "ports": [{"name": "postgres", "containerPort": DB_PORT}],
                                "readinessProbe": {"exec": {"command": ["pg_isready", "-U", DB_USER]}},
                                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
                                "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}],
                            }
                        ],
                    },
                },
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "storageClassName": f"{NAME}-gp3",
                            "resources": {"requests": {"storage": f"{args.database.storage_gib}Gi"}},
                        },
                    }
                ],
            },
            opts=pulumi.ResourceOptions.merge(
                pulumi.ResourceOptions.merge(opts, kept), pulumi.ResourceOptions(depends_on=[storage_class])
            ),
        )
        service = k8s.core.v1.Service(
            f"{name}-postgres-service",
            metadata={"name": f"{NAME}-postgres", "namespace": TRACKING_NAMESPACE, "labels": labels},
            spec={"selector": dict(DATABASE_SELECTOR), "ports": [{"name": "postgres", "port": DB_PORT}]},
            opts=opts,
        )
        host = f"{NAME}-postgres.{TRACKING_NAMESPACE}.svc.cluster.local"
        return pulumi.Output.from_input(host), service
