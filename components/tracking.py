"""An MLflow tracking server in the cluster: the official image at a pinned version on the system
nodes, its backend store in PostgreSQL, its artifacts in the stack's bucket, and no public endpoint.

- **Image.** `ghcr.io/mlflow/mlflow` carries neither PostgreSQL's driver nor boto3 (mlflow/mlflow
  #9513, #8342). Rather than a second image to build, an init container of the same image installs
  both, pinned, into a volume on the server's PYTHONPATH.
- **Artifacts.** The server proxies them (`--artifacts-destination s3://<bucket>/mlflow/`), with a
  Pod Identity that may touch only that prefix: jobs need no access of their own for artifacts.
- **Database.** `rds`: PostgreSQL 17 in the private subnets, encrypted, reachable only from the
  cluster's security group, with deletion protection, retention and a final snapshot in protected
  stacks. `in-cluster` (dev): a PostgreSQL StatefulSet on an encrypted gp3 volume (the EBS CSI
  add-on with its own Pod Identity); the volume is retained when the claim goes. The password is
  generated once and kept in the state as a secret.
- **Reaching it.** A ClusterIP Service: jobs use its cluster DNS name; people port-forward.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
import pulumi_random as random

from components.bucket import ArtifactBucket
from components.pod_identity import EksAccess, pod_identity
from config.tracking import TrackingServerConfig
from conventions import PART_OF, TRACKING_NAMESPACE

MLFLOW_VERSION = "3.17.2"  # requirements-test.txt runs the same server in the tests
MLFLOW_IMAGE = f"ghcr.io/mlflow/mlflow:v{MLFLOW_VERSION}"
SERVER_PACKAGES = ("psycopg2-binary==2.9.13", "boto3==1.44.5")
POSTGRES_MAJOR = "17"  # RDS takes the newest 17.x and its minor upgrades; no drift between runs
POSTGRES_IMAGE = "postgres:17.6"  # Docker's official image, for the in-cluster store
PORT = 5000
NAME = "mlflow"
ARTIFACT_PREFIX = "mlflow/"
DATABASE = "mlflow"
DB_USER = "mlflow"
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
class TrackingNetwork:
    """Where an RDS database goes: the cluster's private subnets, reached from its security group."""

    vpc_id: pulumi.Input[str]
    private_subnet_ids: list[pulumi.Input[str]]
    cluster_security_group_id: pulumi.Input[str]


@dataclass(frozen=True)
class TrackingServerArgs:
    provider: k8s.Provider
    eks: EksAccess
    system_selector: dict[str, str]
    system_nodes: pulumi.Resource | None
    bucket: ArtifactBucket
    database: TrackingServerConfig
    network: TrackingNetwork
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


class TrackingServer(pulumi.ComponentResource):
    def __init__(self, name: str, args: TrackingServerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:tracking:TrackingServer", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)
        kept = pulumi.ResourceOptions(protect=args.protect, retain_on_delete=args.protect)
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace", metadata={"name": TRACKING_NAMESPACE, "labels": PART_OF}, opts=k8s_opts
        )
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
        # Generated once; URL-safe, since it goes into the backend store URI.
        self.password = random.RandomPassword(f"{name}-db-password", length=32, special=False, opts=child)
        self.db_secret = k8s.core.v1.Secret(
            f"{name}-db",
            metadata={"name": f"{NAME}-db", "namespace": TRACKING_NAMESPACE, "labels": PART_OF},
            string_data={"password": self.password.result},
            opts=in_namespace,
        )
        if args.database.database == "rds":
            self.database_host, database = self._rds(name, args, pulumi.ResourceOptions.merge(child, kept))
        else:
            self.database_host, database = self._in_cluster(name, args, in_namespace)

        selector = {"app.kubernetes.io/name": NAME}
        labels = {**PART_OF, **selector}
        store_uri = pulumi.Output.concat(
            f"postgresql://{DB_USER}:$(DB_PASSWORD)@", self.database_host, f":5432/{DATABASE}"
        )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-server",
            metadata={"name": NAME, "namespace": TRACKING_NAMESPACE, "labels": labels},
            spec={
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": NAME,
                        "nodeSelector": dict(args.system_selector),
                        "initContainers": [
                            {
                                "name": "server-packages",
                                "image": MLFLOW_IMAGE,
                                "command": ["pip", "install", "--no-cache-dir", "--target", "/deps"],
                                "args": list(SERVER_PACKAGES),
                                "volumeMounts": [{"name": "deps", "mountPath": "/deps"}],
                            }
                        ],
                        "containers": [
                            {
                                "name": NAME,
                                "image": MLFLOW_IMAGE,
                                "command": ["mlflow", "server"],
                                "args": [
                                    "--host=0.0.0.0",
                                    f"--port={PORT}",
                                    "--workers=2",
                                    pulumi.Output.concat("--backend-store-uri=", store_uri),
                                    pulumi.Output.concat(
                                        "--artifacts-destination=s3://",
                                        bucket.bucket_name,
                                        f"/{ARTIFACT_PREFIX}",
                                    ),
                                ],
                                "env": [
                                    {"name": "PYTHONPATH", "value": "/deps"},
                                    {"name": "MLFLOW_SERVER_ALLOWED_HOSTS", "value": ALLOWED_HOSTS},
                                    self._password_env("DB_PASSWORD"),
                                ],
                                "ports": [{"name": "http", "containerPort": PORT}],
                                "readinessProbe": {
                                    "httpGet": {"path": "/health", "port": PORT},
                                    "periodSeconds": 10,
                                },
                                "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}},
                                "volumeMounts": [{"name": "deps", "mountPath": "/deps"}],
                            }
                        ],
                        "volumes": [{"name": "deps", "emptyDir": {}}],
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
            spec={"selector": selector, "ports": [{"name": "http", "port": PORT, "targetPort": PORT}]},
            opts=in_namespace,
        )
        self.uri = TRACKING_URI
        self.register_outputs({"uri": TRACKING_URI, "portForward": PORT_FORWARD})

    def _password_env(self, name: str) -> dict:
        """The database password from its Secret, as the server and PostgreSQL both read it."""
        return {
            "name": name,
            "valueFrom": {"secretKeyRef": {"name": self.db_secret.metadata["name"], "key": "password"}},
        }

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
                    "from_port": 5432,
                    "to_port": 5432,
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
        self, name: str, args: TrackingServerArgs, opts: pulumi.ResourceOptions
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
        selector = {"app.kubernetes.io/name": f"{NAME}-postgres"}
        labels = {**PART_OF, **selector}
        self.postgres = k8s.apps.v1.StatefulSet(
            f"{name}-postgres",
            metadata={"name": f"{NAME}-postgres", "namespace": TRACKING_NAMESPACE, "labels": labels},
            spec={
                "serviceName": f"{NAME}-postgres",
                "replicas": 1,
                "selector": {"matchLabels": selector},
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
                                    self._password_env("POSTGRES_PASSWORD"),
                                    {"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"},
                                ],
                                "ports": [{"name": "postgres", "containerPort": 5432}],
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
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=[storage_class])),
        )
        service = k8s.core.v1.Service(
            f"{name}-postgres-service",
            metadata={"name": f"{NAME}-postgres", "namespace": TRACKING_NAMESPACE, "labels": labels},
            spec={"selector": selector, "ports": [{"name": "postgres", "port": 5432}]},
            opts=opts,
        )
        host = f"{NAME}-postgres.{TRACKING_NAMESPACE}.svc.cluster.local"
        return pulumi.Output.from_input(host), service
