"""A dataset the stack prepares once into its bucket: a Kubernetes Job that runs the image's
`python -m trainer.prepare_data` on the system nodes, as a service account of its own whose role
writes only datasets/<name>/ (a job's pods only read datasets/: components/pod_identity.py
`job_policy`).

The Job is named by the digest of the dataset's spec (domain/datasets.py), and so is the directory
it writes: a changed spec replaces the Job (a new name) and prepares beside the old files, which
stay. pulumi-kubernetes waits for a Job to complete (`.status.conditions` Complete, failing on
Failed; pulumi_kubernetes/batch/v1/Job.py, the provider's job await) for `timeout_minutes`, so a
training job that depends on it starts on prepared data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.bucket import DATASET_PREFIX
from components.jobs.pods import WORKDIR
from components.pod_identity import EksAccess, bucket_key_statements, pod_identity
from conventions import PART_OF
from domain.datasets import TRAIN_FILE, VAL_FILE, DatasetSpec

DATASET_LABEL = "trainstack.dev/dataset"
WORK_DIR = "/work"  # prepare_data builds the files here before the upload (an emptyDir on the node)
# Tokenizing streams documents in batches: a core and a few GiB, beside the operators.
PREPARE_RESOURCES = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}
BACKOFF_LIMIT = 3  # a failed pod is retried; prepare_data starts over in a fresh work dir


def dataset_policy(bucket_arn: str, kms_key_arn: str | None, name: str) -> dict:
    """What one dataset's preparation does in the bucket: list, read and write its own
    datasets/<name>/, nothing else (not another dataset's files, not checkpoints)."""
    own = f"{DATASET_PREFIX}{name}/"
    statements = [
        {
            "Sid": "ListOwnDataset",
            "Effect": "Allow",
            "Action": ["s3:ListBucket"],
            "Resource": bucket_arn,
            "Condition": {"StringLike": {"s3:prefix": [f"{own}*"]}},
        },
        {
            "Sid": "WriteOwnDataset",
            "Effect": "Allow",
            "Action": ["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"],
            "Resource": f"{bucket_arn}/{own}*",
        },
    ]
    return {"Version": "2012-10-17", "Statement": [*statements, *bucket_key_statements(kms_key_arn)]}


def job_name(spec: DatasetSpec) -> str:
    return f"prepare-{spec.name}-{spec.digest}"


@dataclass(frozen=True)
class DatasetPreparationArgs:
    spec: DatasetSpec
    image: pulumi.Input[str]  # the stack's training image (it holds trainer.prepare_data)
    bucket_name: pulumi.Input[str]
    bucket_arn: pulumi.Input[str]
    kms_key_arn: pulumi.Input[str] | None
    provider: k8s.Provider
    namespace: pulumi.Input[str]  # the training namespace
    eks: EksAccess
    role_name: str
    node_selector: dict[str, str]  # the system nodes
    timeout_minutes: int
    waits_for: list[pulumi.Resource]  # the namespace, the image build, the system nodes


class DatasetPreparation(pulumi.ComponentResource):
    def __init__(self, name: str, args: DatasetPreparationArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("trainstack:datasets:DatasetPreparation", name, None, opts)
        spec = args.spec
        k8s_opts = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.uri = pulumi.Output.concat("s3://", args.bucket_name, f"/{DATASET_PREFIX}{spec.directory}")
        self.train_uri = pulumi.Output.concat(self.uri, TRAIN_FILE)
        self.val_uri = pulumi.Output.concat(self.uri, VAL_FILE)
        labels = {**PART_OF, DATASET_LABEL: spec.name}
        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-service-account",
            metadata={"name": f"dataset-{spec.name}", "namespace": args.namespace, "labels": labels},
            opts=pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(depends_on=args.waits_for)),
        )
        self.role, self.policy, self.association = pod_identity(
            name,
            f"Preparation of the trainstack dataset {spec.name} (EKS Pod Identity)",
            pulumi.Output.all(args.bucket_arn, args.kms_key_arn).apply(
                lambda a: json.dumps(dataset_policy(a[0], a[1], spec.name))
            ),
            args.eks,
            args.namespace,
            self.service_account.metadata["name"],
            pulumi.ResourceOptions(parent=self),
            role_name=args.role_name,
        )
        self.job_name = job_name(spec)
        # No Kueue queue label: Kueue leaves a batch/v1 Job without one alone (its Configuration's
        # manageJobsWithoutQueueName, unset in components/queueing.py kueue_manager_config, defaults
        # to false), so the preparation runs on the system nodes without taking a group's quota.
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={"name": self.job_name, "namespace": args.namespace, "labels": labels},
            spec={
                "backoffLimit": BACKOFF_LIMIT,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": self.service_account.metadata["name"],
                        "restartPolicy": "Never",
                        "nodeSelector": dict(args.node_selector),
                        "containers": [
                            {
                                "name": "prepare",
                                "image": args.image,
                                "workingDir": WORKDIR,
                                "command": ["python", "-m", "trainer.prepare_data"],
                                "args": pulumi.Output.from_input(self.uri).apply(
                                    lambda out: [*spec.prepare_args(out), "--work-dir", WORK_DIR]
                                ),
                                "resources": PREPARE_RESOURCES,
                                "volumeMounts": [{"name": "work", "mountPath": WORK_DIR}],
                            }
                        ],
                        "volumes": [{"name": "work", "emptyDir": {}}],
                    },
                },
            },
            opts=pulumi.ResourceOptions.merge(
                k8s_opts,
                pulumi.ResourceOptions(
                    depends_on=[self.association],
                    custom_timeouts=pulumi.CustomTimeouts(create=f"{args.timeout_minutes}m"),
                    # The data depends on the spec alone (the Job's name): a new image does not
                    # prepare it again (a Job's pod template is immutable: a change would replace it).
                    ignore_changes=["spec.template.spec.containers[0].image"],
                ),
            ),
        )
        self.register_outputs({"uri": self.uri, "job": self.job_name})

    def trainer_args(self) -> list[pulumi.Output[str] | str]:
        """What a job that names this dataset adds to the trainer's arguments."""
        return ["--data", self.train_uri, "--val-data", self.val_uri]
