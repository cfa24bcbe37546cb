"""Shared storage for jobs: FSx for Lustre at /checkpoints, and the bucket's datasets through
Mountpoint for Amazon S3.

The file system (PERSISTENT_2, Lustre 2.15) lives in one subnet, the AZ of the GPU groups that mount
it, behind a security group that lets Lustre's LNET ports (TCP 988 and 1018-1023) in from itself and
from the nodes. A data repository association links its /checkpoints to the bucket's checkpoints/:
what a job writes is exported to S3 by the file system itself, and S3 objects appear on read.
Deletions go one way only, from S3 to the volume: the trainer's pruning on the volume never
deletes the S3 copies, which the bucket's lifecycle keeps for storage.checkpointRetentionDays. The
FSx CSI driver (EKS add-on, Pod Identity) mounts it through a static PersistentVolume and claim in
the training namespace. Mountpoint (EKS add-on, Pod Identity, read-only) serves datasets/: reads
only, since it has no rename or random writes, so checkpoints never go through it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.bucket import CHECKPOINT_PREFIX, DATASET_PREFIX, ArtifactBucket
from components.ci_fence import fsx_linked_role
from components.cluster import Cluster
from components.pod_identity import EksAccess, pod_identity
from conventions import PART_OF

LUSTRE_PORTS = ((988, 988), (1018, 1023))  # LNET: servers with each other, and clients with servers
FSX_MOUNT_PATH = "/checkpoints"  # in the file system, linked to s3://<bucket>/checkpoints/
FSX_CLAIM = "fsx-checkpoints"
DATASETS_CLAIM = "s3-datasets"
FSX_CSI_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
S3_CSI_SERVICE_ACCOUNT = "s3-csi-driver-sa"
# S3 keeps what the volume keeps: the trainer prunes the checkpoints it no longer keeps
# (storage.checkpointsKept, checkpointKeepEvery) off the volume, and DELETED carries each deletion
# to S3 (AWS FSx API reference, AutoExportPolicy: "DELETED - Files and directories are
# automatically deleted on the data repository when they are deleted on the file system").
EXPORT_EVENTS = ["NEW", "CHANGED", "DELETED"]
# What S3 removes (the lifecycle's expiry) leaves the volume too (AutoImportPolicy: "DELETED -
# Amazon FSx automatically deletes files on the file system as corresponding files are deleted in
# the data repository").
IMPORT_EVENTS = ["NEW", "CHANGED", "DELETED"]


def lustre_client_script() -> str:
    """A node user data script that installs the Lustre client: the AL2023 EKS AMIs (NVIDIA
    included) are not known to carry it. The node group puts it in its MIME user data."""
    return "#!/bin/bash\nset -euo pipefail\ndnf install -y lustre-client\nmodprobe lustre\n"


def fsx_key_statement(account_id: str, region: str, file_system_id: str) -> dict:
    """What a KMS-encrypted bucket's key must allow the file system's own service-linked role (by its
    exact name: the role exists only once the file system is linked), through S3 only."""
    return {
        "Sid": "FSxLustreLinkedBucket",
        "Effect": "Allow",
        "Principal": {"AWS": "*"},
        "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"],
        "Resource": "*",
        "Condition": {
            "ArnEquals": {"aws:PrincipalArn": fsx_linked_role(account_id, file_system_id)},
            "StringEquals": {"kms:CallerAccount": account_id, "kms:ViaService": f"s3.{region}.amazonaws.com"},
        },
    }


@dataclass(frozen=True)
class FsxCheckpointsArgs:
    cluster: Cluster
    subnet_id: pulumi.Input[str]  # in the AZ of the groups that mount it
    vpc_id: pulumi.Input[str]
    client_security_group_ids: list[pulumi.Input[str]]  # the nodes'
    storage_capacity_gib: int
    throughput_per_tib: int
    bucket: ArtifactBucket
    account_id: str
    region: str
    namespace: pulumi.Resource
    namespace_name: str
    protect: bool


class FsxCheckpoints(pulumi.ComponentResource):
    def __init__(self, name: str, args: FsxCheckpointsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:storage:FsxCheckpoints", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-lustre",
            description="FSx for Lustre: LNET from itself and the nodes",
            vpc_id=args.vpc_id,
            opts=child,
        )
        sources = {"self": self.security_group.id} | {
            f"clients{i}": sg for i, sg in enumerate(args.client_security_group_ids)
        }
        for source, sg in sources.items():
            for low, high in LUSTRE_PORTS:
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-lustre-{source}-{low}",
                    security_group_id=self.security_group.id,
                    referenced_security_group_id=sg,
                    ip_protocol="tcp",
                    from_port=low,
                    to_port=high,
                    description=f"Lustre LNET from {source}",
                    opts=child,
                )
        # The provider removes a new group's default egress: the servers reach each other, the
        # clients and S3 (the repository) out of it.
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-lustre-out",
            security_group_id=self.security_group.id,
            cidr_ipv4="0.0.0.0/0",
            ip_protocol="-1",
            description="Lustre servers: to each other, the nodes and S3",
            opts=child,
        )
        keep = pulumi.ResourceOptions(parent=self, protect=args.protect, retain_on_delete=args.protect)
        self.file_system = aws.fsx.LustreFileSystem(
            name,
            deployment_type="PERSISTENT_2",
            storage_type="SSD",
            storage_capacity=args.storage_capacity_gib,
            per_unit_storage_throughput=args.throughput_per_tib,
            subnet_ids=args.subnet_id,  # one subnet: one AZ (a string in pulumi-aws 7)
            security_group_ids=[self.security_group.id],
            file_system_type_version="2.15",
            metadata_configuration={"mode": "AUTOMATIC"},
            data_compression_type="LZ4",
            tags={"Name": name},
            opts=keep,
        )
        repository_deps = []
        if args.bucket.kms_key is not None:
            repository_deps.append(
                aws.kms.KeyPolicy(
                    f"{name}-bucket-key",
                    key_id=args.bucket.kms_key.key_id,
                    policy=self.file_system.id.apply(
                        lambda fs_id: json.dumps(
                            {
                                "Version": "2012-10-17",
                                "Statement": [
                                    {
                                        "Sid": "AccountAdministers",
                                        "Effect": "Allow",
                                        "Principal": {"AWS": f"arn:aws:iam::{args.account_id}:root"},
                                        "Action": "kms:*",
                                        "Resource": "*",
                                    },
                                    fsx_key_statement(args.account_id, args.region, fs_id),
                                ],
                            }
                        )
                    ),
                    opts=child,
                )
            )
        self.association = aws.fsx.DataRepositoryAssociation(
            f"{name}-checkpoints",
            file_system_id=self.file_system.id,
            file_system_path=FSX_MOUNT_PATH,
            data_repository_path=pulumi.Output.concat(
                "s3://", args.bucket.bucket_name, f"/{CHECKPOINT_PREFIX}"
            ),
            batch_import_meta_data_on_create=True,  # a relaunch sees checkpoints already in S3
            delete_data_in_filesystem=False,
            s3={
                "auto_export_policy": {"events": EXPORT_EVENTS},
                "auto_import_policy": {"events": IMPORT_EVENTS},
            },
            # Linked once the bucket's policy lets the file system's role in (its fence names it).
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*repository_deps, args.bucket.policy]),
        )
        # The CSI driver's controller only provisions file systems dynamically; the static volume
        # below needs no FSx call, but the add-on wants its service account's identity.
        _, _, association = pod_identity(
            f"{name}-csi",
            "FSx CSI driver of trainstack (EKS Pod Identity)",
            json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Action": ["fsx:DescribeFileSystems"],
                            "Resource": "*",
                        }
                    ],
                }
            ),
            EksAccess.of(args.cluster),
            "kube-system",
            FSX_CSI_SERVICE_ACCOUNT,
            child,
        )
        self.driver = csi_driver(f"{name}-csi-driver", "aws-fsx-csi-driver", args.cluster, association, self)
        k8s_opts = pulumi.ResourceOptions(
            parent=self, provider=args.cluster.provider, depends_on=[self.driver]
        )
        self.volume = k8s.core.v1.PersistentVolume(
            f"{name}-pv",
            metadata={"name": f"{args.namespace_name}-{FSX_CLAIM}", "labels": PART_OF},
            spec={
                "capacity": {"storage": f"{args.storage_capacity_gib}Gi"},
                "volumeMode": "Filesystem",
                "accessModes": ["ReadWriteMany"],
                "mountOptions": ["flock"],
                "persistentVolumeReclaimPolicy": "Retain",  # the file system is the stack's, not the claim's
                "storageClassName": "",
                "csi": {
                    "driver": "fsx.csi.aws.com",
                    "volumeHandle": self.file_system.id,
                    "volumeAttributes": {
                        "dnsname": self.file_system.dns_name,
                        "mountname": self.file_system.mount_name,
                    },
                },
            },
            opts=k8s_opts,
        )
        self.claim = static_claim(
            f"{name}-pvc",
            FSX_CLAIM,
            "ReadWriteMany",
            f"{args.storage_capacity_gib}Gi",
            self.volume,
            args.cluster,
            args.namespace,
            args.namespace_name,
            self,
        )
        self.claim_name = FSX_CLAIM
        self.register_outputs({"fileSystemId": self.file_system.id, "claim": FSX_CLAIM})


@dataclass(frozen=True)
class S3DatasetsArgs:
    cluster: Cluster
    bucket: ArtifactBucket
    namespace: pulumi.Resource
    namespace_name: str
    region: str
    # Mountpoint sizes its concurrent reads from it; it would ask the instance metadata, which its
    # pods cannot reach (hop limit 1), and fall back to 10 Gbit/s.
    maximum_throughput_gbps: float | None = None


def mount_options(args: S3DatasetsArgs) -> list[str]:
    """Mountpoint's flags: read-only under datasets/, the bucket's region (no metadata to detect it
    from), and the nodes' network bandwidth."""
    options = ["read-only", f"prefix {DATASET_PREFIX}", "allow-other", f"region {args.region}"]
    if args.maximum_throughput_gbps:
        # mount-s3 takes a whole number of at least 1 (cli.rs: u64, range 1..): 2.5 would not mount.
        options.append(f"maximum-throughput-gbps {max(1, math.floor(args.maximum_throughput_gbps))}")
    return options


class S3Datasets(pulumi.ComponentResource):
    """The bucket's datasets/ through Mountpoint for Amazon S3, read-only."""

    def __init__(self, name: str, args: S3DatasetsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:storage:S3Datasets", name, None, opts)
        bucket = args.bucket
        policy = pulumi.Output.all(bucket.arn, bucket.kms_key.arn if bucket.kms_key else None).apply(
            lambda a: json.dumps(dataset_read_policy(*a))
        )
        _, _, association = pod_identity(
            f"{name}-csi",
            "Mountpoint for S3 CSI driver of trainstack (EKS Pod Identity): read datasets/",
            policy,
            EksAccess.of(args.cluster),
            "kube-system",
            S3_CSI_SERVICE_ACCOUNT,
            pulumi.ResourceOptions(parent=self),
        )
        self.driver = csi_driver(
            f"{name}-csi-driver", "aws-mountpoint-s3-csi-driver", args.cluster, association, self
        )
        k8s_opts = pulumi.ResourceOptions(
            parent=self, provider=args.cluster.provider, depends_on=[self.driver]
        )
        self.volume = k8s.core.v1.PersistentVolume(
            f"{name}-pv",
            metadata={"name": f"{args.namespace_name}-{DATASETS_CLAIM}", "labels": PART_OF},
            spec={
                "capacity": {"storage": "1Ti"},  # required by the API, ignored by the driver
                "accessModes": ["ReadOnlyMany"],
                "mountOptions": mount_options(args),
                "storageClassName": "",
                "csi": {
                    "driver": "s3.csi.aws.com",
                    "volumeHandle": f"{args.namespace_name}-{DATASETS_CLAIM}",
                    "volumeAttributes": {"bucketName": bucket.bucket_name},
                },
            },
            opts=k8s_opts,
        )
        self.claim = static_claim(
            f"{name}-pvc",
            DATASETS_CLAIM,
            "ReadOnlyMany",
            "1Ti",
            self.volume,
            args.cluster,
            args.namespace,
            args.namespace_name,
            self,
        )
        self.claim_name = DATASETS_CLAIM
        self.register_outputs({"claim": DATASETS_CLAIM})


def csi_driver(
    name: str, addon: str, cluster: Cluster, identity: pulumi.Resource, parent: pulumi.Resource
) -> aws.eks.Addon:
    """A CSI driver as an EKS add-on (EKS's default build for the cluster version), once its
    service account's Pod Identity exists and nodes can run its controller."""
    return aws.eks.Addon(
        name,
        cluster_name=cluster.cluster_name,
        addon_name=addon,
        resolve_conflicts_on_create="OVERWRITE",
        resolve_conflicts_on_update="OVERWRITE",
        opts=pulumi.ResourceOptions(parent=parent, depends_on=[cluster.system_nodes, identity]),
    )


def static_claim(
    name: str,
    claim: str,
    access: str,
    size: str,
    volume: k8s.core.v1.PersistentVolume,
    cluster: Cluster,
    namespace: pulumi.Resource,
    namespace_name: str,
    parent: pulumi.Resource,
) -> k8s.core.v1.PersistentVolumeClaim:
    """A claim bound to exactly `volume` (no storage class: never provisioned dynamically)."""
    return k8s.core.v1.PersistentVolumeClaim(
        name,
        metadata={"name": claim, "namespace": namespace_name, "labels": PART_OF},
        spec={
            "accessModes": [access],
            "storageClassName": "",
            "volumeName": volume.metadata["name"],
            "resources": {"requests": {"storage": size}},
        },
        opts=pulumi.ResourceOptions(parent=parent, provider=cluster.provider, depends_on=[volume, namespace]),
    )


def dataset_read_policy(bucket_arn: str, kms_key_arn: str | None) -> dict:
    statements = [
        {
            "Sid": "ListDatasets",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": bucket_arn,
            "Condition": {"StringLike": {"s3:prefix": [f"{DATASET_PREFIX}*"]}},
        },
        {
            "Sid": "ReadDatasets",
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": f"{bucket_arn}/{DATASET_PREFIX}*",
        },
    ]
    if kms_key_arn:
        statements.append(
            {"Sid": "DecryptDatasets", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": kms_key_arn}
        )
    return {"Version": "2012-10-17", "Statement": statements}
