"""Config for a cluster trainstack did not create: an EKS cluster by name, or any cluster a kubeconfig
file reaches (kind on a laptop). With one named, the stack creates no VPC, EKS cluster or node
group: it describes the nodes it uses (`gpuNodeGroups[].nodeSelector`, `existingCluster.systemNodes`)
and puts only its operators, queues and jobs on the cluster, in their own namespaces and releases.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from config.names import PROJECT
from config.schema import Reader, setting
from conventions import TRAINING_NAMESPACE

_EKS_NAME = re.compile(r"[0-9A-Za-z][A-Za-z0-9_-]{0,99}")
NUMBERS = {2: "two", 3: "three"}
_HYPERPOD_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}")
_ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]{1,512}")
_S3_URI = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?")
# A label key (optional DNS prefix, then a name) and value, as Kubernetes validates them.
_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
)
# A PersistentVolumeClaim's name: a DNS-1123 subdomain (Kubernetes' ValidatePersistentVolumeName).
_CLAIM_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
# Where a node keeps local data (FHS: /var/local, /srv, /mnt), or a /data disk: a checkpoint path
# below one of them is no system directory (/, /etc, /var/lib/kubelet, /run, /proc...).
HOST_PATH_ROOTS = ("/var/local", "/srv", "/mnt", "/data")


def default_system_selector() -> dict[str, str]:
    return {"kubernetes.io/os": "linux"}


@dataclass(frozen=True)
class SystemNodesConfig:
    node_selector: dict[str, str] = setting(
        "nodeSelector",
        "Labels of the nodes operators, Ray heads and CPU jobs run on.",
        factory=default_system_selector,
    )
    cpus: int = setting("cpus", "vCPUs of one of them (a CPU job asks for half).", 2)
    memory_gib: int = setting("memoryGiB", "Memory of one of them in GiB (a CPU job asks for half).", 8)
    count: int = setting("count", "How many of them CPU jobs may use at once (the system queue's size).", 1)


@dataclass(frozen=True)
class S3AccessConfig:
    uri: str = setting("uri", "s3://bucket/prefix under which each job keeps checkpoints/<job>/.")
    credentials_secret: str = setting(
        "credentialsSecret",
        "A Secret you create in the training namespace with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.",
    )


@dataclass(frozen=True)
class ExistingClusterConfig:
    eks_cluster_name: str | None = setting(
        "eksClusterName",
        "An EKS cluster in the stack's region to deploy onto (not created or changed).",
        None,
    )
    hyper_pod_cluster_name: str | None = setting(
        "hyperPodClusterName",
        "A SageMaker HyperPod cluster orchestrated by EKS, by its own name: before anything is registered "
        "the stack asks SageMaker (DescribeCluster) for its EKS cluster and its instance groups' types; "
        "instead of eksClusterName.",
        None,
    )
    kubeconfig: str | None = setting(
        "kubeconfig",
        "Path to a kubeconfig file of the cluster to deploy onto (kind, any cluster); no AWS is used.",
        None,
    )
    context: str | None = setting("context", "The kubeconfig context (default: its current one).", None)
    system_nodes: SystemNodesConfig = setting(
        "systemNodes", "The cluster's nodes for operators, Ray heads and CPU jobs.", factory=SystemNodesConfig
    )
    pod_role_arn: str | None = setting(
        "podRoleArn",
        "EKS: an IAM role for the training pods (Pod Identity); default: a role the stack makes for its bucket.",
        None,
    )
    checkpoint_host_path: str | None = setting(
        "checkpointHostPath",
        "kubeconfig: keep checkpoints under this node path, one directory per job, shared by the nodes "
        "(kind's extraMounts); instead of S3.",
        None,
    )
    s3: S3AccessConfig | None = setting(
        "s3", "kubeconfig: checkpoints in S3 with credentials from a Secret you provide.", None
    )
    checkpoint_claim: str | None = setting(
        "checkpointClaim",
        "A PersistentVolumeClaim you made in the stack's namespace (existingCluster.namespace), Bound, and "
        "ReadWriteMany unless every job runs on one node (an FSx for Lustre claim), every job keeps its "
        "checkpoints on: /checkpoints is its directory checkpoints/<job>; instead of S3 or a node path. "
        "Checked when the cluster is read.",
        None,
    )
    namespace: str = setting(
        "namespace",
        "The namespace the stack's jobs, queues, Secrets and service accounts go in. On SageMaker "
        "HyperPod, job auto-resume watches only `kubeflow` and namespaces starting with `hyperpod`.",
        TRAINING_NAMESPACE,
    )
    kind_cluster_name: str | None = setting(
        "kindClusterName",
        "kubeconfig: the kind cluster the image is loaded into (image.builder: kind).",
        None,
    )

    @property
    def named(self) -> bool:
        return (
            self.eks_cluster_name is not None
            or self.hyper_pod_cluster_name is not None
            or self.kubeconfig is not None
        )

    @property
    def on_eks(self) -> bool:
        """An EKS cluster, by its name or its HyperPod cluster's."""
        return self.eks_cluster_name is not None or self.hyper_pod_cluster_name is not None

    @property
    def uses_aws(self) -> bool:
        """An EKS cluster is reached through AWS; a kubeconfig stack uses no AWS account at all."""
        return self.kubeconfig is None


def check_selector(selector: dict[str, str], key: str, r: Reader) -> None:
    if not selector:
        r.problem(
            key, selector, "a node selector is needed to find these nodes", "a map of node label to value"
        )
    for k, v in selector.items():
        if (
            not _LABEL_KEY.fullmatch(k)
            or len(k.rpartition("/")[2]) > 63
            or not _LABEL_VALUE.fullmatch(str(v))
        ):
            r.problem(f"{key}.{k}", v, "not a valid node label and value", "a Kubernetes label key and value")


def check_host_path(path: str, key: str, r: Reader) -> None:
    """Job pods mount the path read-write from every node: a directory of its own under a root
    meant for local data, never the node's system (/, /etc, the kubelet's or containerd's state)."""
    if not path.startswith("/"):
        r.problem(key, path, "not an absolute path", "/var/local/trainstack, say")
        return
    parts = path.split("/")
    inside = any(posixpath.normpath(path).startswith(f"{root}/") for root in HOST_PATH_ROOTS)
    if ".." in parts or not inside:
        r.problem(
            key,
            path,
            "job pods would write there on every node; not a directory of its own for data",
            f"a directory below {', '.join(HOST_PATH_ROOTS)} (/var/local/trainstack, say), without ..",
        )


def check_existing_cluster(e: ExistingClusterConfig, r: Reader) -> None:
    k = f"{PROJECT}:existingCluster"
    if not _NAMESPACE.fullmatch(e.namespace) or e.namespace.startswith("kube-"):
        r.problem(
            f"{k}.namespace", e.namespace, "not a namespace the stack can own", "a DNS label, not kube-*"
        )
    given = [
        key
        for key, value in (
            ("eksClusterName", e.eks_cluster_name),
            ("hyperPodClusterName", e.hyper_pod_cluster_name),
            ("kubeconfig", e.kubeconfig),
        )
        if value is not None
    ]
    if len(given) > 1:
        r.problem(
            k,
            " and ".join(given),
            f"names {NUMBERS[len(given)]} clusters",
            "one of eksClusterName, hyperPodClusterName or kubeconfig",
        )
    if e.hyper_pod_cluster_name is not None and not _HYPERPOD_NAME.fullmatch(e.hyper_pod_cluster_name):
        r.problem(
            f"{k}.hyperPodClusterName",
            e.hyper_pod_cluster_name,
            "not a SageMaker HyperPod cluster name",
            "1-63 letters, digits and hyphens, starting and ending with a letter or digit",
        )
    if e.eks_cluster_name is not None and not _EKS_NAME.fullmatch(e.eks_cluster_name):
        r.problem(
            f"{k}.eksClusterName",
            e.eks_cluster_name,
            "not an EKS cluster name",
            "1-100 letters, digits, - and _",
        )
    if e.kubeconfig is not None and not e.kubeconfig.strip():
        r.problem(f"{k}.kubeconfig", e.kubeconfig, "empty path", "the path of a kubeconfig file")
    s = e.system_nodes
    check_selector(s.node_selector, f"{k}.systemNodes.nodeSelector", r)
    r.ranges(
        f"{k}.systemNodes",
        (("cpus", s.cpus, 1, 512), ("memoryGiB", s.memory_gib, 1, 4096), ("count", s.count, 1, 1000)),
    )
    eks_only = (("podRoleArn", e.pod_role_arn),)
    kubeconfig_only = (
        ("checkpointHostPath", e.checkpoint_host_path),
        ("s3", e.s3),
        ("kindClusterName", e.kind_cluster_name),
    )
    for name, value in eks_only:
        if value is not None and not e.on_eks:
            r.problem(
                f"{k}.{name}",
                value,
                "only with eksClusterName or hyperPodClusterName (Pod Identity is EKS's)",
                "unset",
            )
    for name, value in kubeconfig_only:
        if value is not None and e.kubeconfig is None:
            r.problem(
                f"{k}.{name}",
                value,
                "only with kubeconfig (an EKS stack keeps checkpoints in its bucket)",
                "unset",
            )
    if e.pod_role_arn is not None and not _ROLE_ARN.fullmatch(e.pod_role_arn):
        r.problem(
            f"{k}.podRoleArn", e.pod_role_arn, "not an IAM role ARN", "arn:aws:iam::<account>:role/<name>"
        )
    if e.checkpoint_claim is not None:
        if not e.named:
            r.problem(
                f"{k}.checkpointClaim",
                e.checkpoint_claim,
                "only on a cluster the stack did not create (a created one mounts storage.fsx)",
                "unset, or eksClusterName or kubeconfig",
            )
        if len(e.checkpoint_claim) > 253 or not _CLAIM_NAME.fullmatch(e.checkpoint_claim):
            r.problem(
                f"{k}.checkpointClaim",
                e.checkpoint_claim,
                "not a PersistentVolumeClaim name",
                "lower-case letters, digits, '-' and '.', at most 253 (fsx-claim, say)",
            )
    if e.kubeconfig is not None:
        homes = [e.checkpoint_host_path, e.s3, e.checkpoint_claim]
        if sum(home is not None for home in homes) != 1:
            r.problem(
                f"{k}.checkpointHostPath",
                e.checkpoint_host_path,
                "a kubeconfig stack keeps checkpoints on a node path, in S3 or on a claim, one of them",
                "checkpointHostPath (an absolute path), s3 with a credentials Secret, or checkpointClaim",
            )
        if e.checkpoint_host_path is not None:
            check_host_path(e.checkpoint_host_path, f"{k}.checkpointHostPath", r)
        if e.s3 is not None and not _S3_URI.fullmatch(e.s3.uri):
            r.problem(f"{k}.s3.uri", e.s3.uri, "not an S3 URI", "s3://bucket/prefix")
