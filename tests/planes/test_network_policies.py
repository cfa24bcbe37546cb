"""A network that is not flat: the VPC CNI enforces NetworkPolicies, and in the training and
tracking namespaces a pod accepts only the flows the stack needs. The flows are checked by
evaluating the planned policies, with `networking.k8s.io/v1` semantics, against the labels the
planned pods really carry (job templates, the MLflow Deployment and StatefulSet, the KubeRay
operator as its real chart renders it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import kubernetes_validate
import pytest
from support.charts import render
from support.plans import EXISTING_CLUSTER, plan, stack_values

from components.network_policy import NAMESPACE_NAME_LABEL
from conventions import DEFAULT_DENY_POLICY, JOB_LABEL, PART_OF, TRACKING_NAMESPACE, TRAINING_NAMESPACE
from offline.engine import run_program
from offline.plan import manifest_of

POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
JOBS = [
    {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "gpu", "nodes": 1, "wait": "none"},
    {"name": "other", "kind": "PyTorchJob", "nodeGroup": "system", "nodes": 2, "steps": 20},
    {"name": "ray-l4", "kind": "RayJob", "nodeGroup": "gpu", "wait": "none"},
    {"name": "ray-box", "kind": "RayCluster", "nodeGroup": "gpu", "wait": "none"},
]
# Ports the flows use: torchrun's c10d store (the operator's default master port), an NCCL or Ray
# worker port chosen at run time, and Ray's head ports (GCS, dashboard, client).
C10D, EPHEMERAL, GCS, DASHBOARD, CLIENT = 23456, 41234, 6379, 8265, 10001


@pytest.fixture(scope="module")
def run():
    return plan("dev", jobs=JOBS, tracking={"mode": "server", "experiment": "llama"})


# --- networking.k8s.io/v1 semantics ------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector: every matchLabels pair and every matchExpression; empty selects all."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values", [])
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def peer_admits(peer: dict[str, Any], policy_namespace: str, source: Pod) -> bool:
    """A peer with no namespaceSelector means the policy's namespace; with both, both must match."""
    namespace = peer.get("namespaceSelector")
    if namespace is None:
        in_namespace = source.namespace == policy_namespace
    else:
        in_namespace = selects(namespace, {NAMESPACE_NAME_LABEL: source.namespace})
    return in_namespace and selects(peer.get("podSelector") or {}, source.labels)


def admitted(policies: list[dict], source: Pod, target: Pod, port: int) -> bool:
    """Whether `target` accepts a TCP connection from `source` on `port`: open when no Ingress
    policy selects it, else when a rule of one of those that do allows it (their union)."""
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == target.namespace
        and "Ingress" in p["spec"]["policyTypes"]
        and selects(p["spec"]["podSelector"], target.labels)
    ]
    if not selecting:
        return True
    for p in selecting:
        for rule in p["spec"].get("ingress") or []:
            ports = rule.get("ports")
            if ports is not None and not any(
                x.get("protocol", "TCP") == "TCP" and x["port"] == port for x in ports
            ):
                continue
            peers = rule.get("from")
            if peers is None or any(peer_admits(peer, p["metadata"]["namespace"], source) for peer in peers):
                return True
    return False


# --- the planned pods -----------------------------------------------------------------------------


def manifests(run, type_: str) -> list[dict]:
    return [manifest_of(r)[1] for r in run.by_type(type_)]


def job_manifest(run, name: str) -> dict:
    (reg,) = [r for r in run.resources if r.name == f"job-{name}" and r.custom]
    return manifest_of(reg)[1]


def pod(run, job: str, role: str = "worker") -> Pod:
    """A pod of `job` as its template labels it (role: worker, head or submitter)."""
    m = job_manifest(run, job)
    spec = m["spec"]
    if m["kind"] == "PyTorchJob":
        template = spec["pytorchReplicaSpecs"]["Worker"]["template"]
    elif role == "submitter":
        template = spec["submitterPodTemplate"]
    else:
        cluster = spec.get("rayClusterSpec", spec)
        template = (
            cluster["headGroupSpec"]["template"]
            if role == "head"
            else cluster["workerGroupSpecs"][0]["template"]
        )
    return Pod(TRAINING_NAMESPACE, template["metadata"]["labels"])


def workload_pod(run, type_: str, name: str) -> Pod:
    reg = run.one(type_, name)
    return Pod(reg.inputs["metadata"]["namespace"], reg.inputs["spec"]["template"]["metadata"]["labels"])


def mlflow(run) -> Pod:
    return workload_pod(run, "kubernetes:apps/v1:Deployment", "tracking-server")


def postgres(run) -> Pod:
    return workload_pod(run, "kubernetes:apps/v1:StatefulSet", "tracking-postgres")


STRANGER = Pod("default", {"app": "anything"})


def test_vpc_cni_enforces_network_policies(prod_plan, dev_plan):
    """Off by default in the add-on: every NetworkPolicy would be accepted and ignored."""
    for run in (prod_plan, dev_plan):
        values = run.one("eks:index:Cluster").inputs["vpcCniOptions"]["configurationValues"]
        # The add-on's configuration schema takes the flag as a string.
        assert values == {"enableNetworkPolicy": "true"}


def test_policies_validate_and_deny_by_default(run):
    policies = manifests(run, POLICY)
    for m in policies:
        kubernetes_validate.validate(m, "1.33", strict=True)
    denies = {
        m["metadata"]["namespace"]: m["spec"]
        for m in policies
        if m["metadata"]["name"] == DEFAULT_DENY_POLICY
    }
    # Every pod of both namespaces, no rule: only what another policy allows gets in.
    assert denies == {
        ns: {"podSelector": {}, "policyTypes": ["Ingress"]} for ns in (TRAINING_NAMESPACE, TRACKING_NAMESPACE)
    }
    # Nothing outside the two namespaces reaches a job's pods or the tracking server.
    for target in (pod(run, "fsdp"), pod(run, "ray-l4", "head"), pod(run, "ray-box", "worker"), mlflow(run)):
        for port in (C10D, GCS, DASHBOARD, 5000):
            assert not admitted(policies, STRANGER, target, port), (target, port)
        # Nor a pod of the training namespace that is no job's.
        assert not admitted(policies, Pod(TRAINING_NAMESPACE, {"app": "debug"}), target, DASHBOARD)


def test_a_jobs_pods_reach_each_other_and_no_other_job(run):
    """torchrun's rendezvous and NCCL/gloo between one PyTorchJob's pods, on any port; never from
    another job's pods (a job cannot reach into another's rendezvous or its process group)."""
    policies = manifests(run, POLICY)
    fsdp, other = pod(run, "fsdp"), pod(run, "other")
    for port in (C10D, EPHEMERAL):
        assert admitted(policies, fsdp, fsdp, port)
        assert admitted(policies, other, other, port)
        assert not admitted(policies, other, fsdp, port)
        assert not admitted(policies, pod(run, "ray-l4", "head"), fsdp, port)
        assert not admitted(policies, fsdp, pod(run, "ray-l4", "worker"), port)


def test_a_ray_cluster_talks_within_itself_and_its_head_to_its_submitter(run):
    """Head and workers of one Ray cluster on every port (GCS, object and node managers, worker
    ports); the head's dashboard from the RayJob's submitter and the KubeRay operator only."""
    policies = manifests(run, POLICY)
    head, worker = pod(run, "ray-l4", "head"), pod(run, "ray-l4", "worker")
    submitter = pod(run, "ray-l4", "submitter")
    for port in (GCS, DASHBOARD, CLIENT, EPHEMERAL):
        assert admitted(policies, worker, head, port)
        assert admitted(policies, head, worker, port)
        assert admitted(policies, worker, worker, port)
        # Another Ray cluster's pods do not get in, whichever port.
        assert not admitted(policies, pod(run, "ray-box", "worker"), head, port)
        assert not admitted(policies, head, pod(run, "ray-box", "head"), port)
    assert admitted(policies, submitter, head, DASHBOARD)
    # `ray job submit` needs the dashboard only: not the GCS, the client port, or the workers.
    for port in (GCS, CLIENT):
        assert not admitted(policies, submitter, head, port)
    assert not admitted(policies, submitter, worker, DASHBOARD)
    # The operator, as its real chart labels it in its namespace, polls the job on the dashboard.
    objects = render(run, "kuberay-operator")
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    operator = Pod(deployment["metadata"]["namespace"], deployment["spec"]["template"]["metadata"]["labels"])
    assert operator.namespace == "kuberay-system"
    assert admitted(policies, operator, head, DASHBOARD)
    assert admitted(policies, operator, pod(run, "ray-box", "head"), DASHBOARD)
    assert not admitted(policies, operator, head, GCS)
    assert not admitted(policies, operator, worker, DASHBOARD)


def test_the_tracking_server_takes_the_jobs_and_its_database_only_the_server(run):
    policies = manifests(run, POLICY)
    server, database = mlflow(run), postgres(run)
    assert server.namespace == database.namespace == TRACKING_NAMESPACE
    for job in (pod(run, "fsdp"), pod(run, "ray-l4", "head"), pod(run, "ray-l4", "worker")):
        assert admitted(policies, job, server, 5000)
        assert not admitted(policies, job, server, 5432)
        assert not admitted(policies, job, database, 5432)
    assert admitted(policies, server, database, 5432)
    assert not admitted(policies, server, database, 5000)
    # A pod that carries a job's label in another namespace is not a job.
    assert not admitted(policies, Pod("default", pod(run, "fsdp").labels), server, 5000)


def test_allows_go_in_before_the_deny_and_jobs_after_both(run):
    """Turning the deny on never cuts a running job off; a job starts once its flows are open."""
    by_name = {r.name: r for r in run.by_type(POLICY)}
    allows = [
        r
        for n, r in by_name.items()
        if n.startswith("training-network-") and not n.endswith(DEFAULT_DENY_POLICY)
    ]
    assert {r.inputs["metadata"]["name"] for r in allows} == {
        "job-fsdp",
        "job-other",
        "job-ray-l4",
        "job-ray-l4-dashboard",
        "job-ray-box",
        "job-ray-box-dashboard",
    }
    deny = by_name[f"training-network-{DEFAULT_DENY_POLICY}"]
    assert {r.urn for r in allows} <= set(deny.dependencies)
    for name in ("fsdp", "ray-l4"):
        (job,) = [r for r in run.resources if r.name == f"job-{name}" and r.custom]
        assert {deny.urn, by_name[f"training-network-job-{name}"].urn} <= set(job.dependencies)
    tracking_deny = by_name[f"tracking-network-{DEFAULT_DENY_POLICY}"]
    assert by_name["tracking-network-mlflow-server"].urn in tracking_deny.dependencies


def test_an_rds_database_is_outside_the_cluster():
    """An RDS store is reached through its security group, not a pod: no database policy."""
    run = plan("prod", tracking={"mode": "server", "server": {"database": "rds", "storageGiB": 50}})
    names = {(m["metadata"]["namespace"], m["metadata"]["name"]) for m in manifests(run, POLICY)}
    assert {(TRACKING_NAMESPACE, "mlflow-server"), (TRACKING_NAMESPACE, DEFAULT_DENY_POLICY)} <= names
    assert (TRACKING_NAMESPACE, "mlflow-database") not in names


def test_an_existing_cluster_gets_the_policies_but_not_the_add_on():
    """On a cluster the stack did not create the policies are written, and enforced only where
    its owner turned enforcement on (the README says how): the stack changes no add-on there."""
    run = plan("existing", facts=EXISTING_CLUSTER)
    assert not run.by_type("eks:index:Cluster") and not run.by_type("aws:eks/addon:Addon")
    names = {m["metadata"]["name"] for m in manifests(run, POLICY)}
    assert names == {"trainstack-existing-default-deny-ingress", "job-llama-1b-fsdp"}


def test_in_a_namespace_the_stack_does_not_own_the_deny_is_the_stacks_own_and_selects_its_pods():
    """The owner's namespace may hold a `default-deny-ingress` of its own (the Kubernetes docs' name)
    and pods of its own, of other users' jobs and of other stacks' jobs: the stack's deny has the
    stack's name and selects only its own jobs' pods, so it neither collides with the owner's policy
    nor cuts anyone else's traffic; with no jobs there is nothing to deny. On its own cluster the deny
    keeps its name and covers the whole namespace."""
    attached = {m["metadata"]["name"]: m for m in manifests(plan("existing", facts=EXISTING_CLUSTER), POLICY)}
    deny = attached["trainstack-existing-default-deny-ingress"]
    own_jobs = {"key": JOB_LABEL, "operator": "In", "values": ["llama-1b-fsdp"]}
    assert deny["spec"] == {
        "podSelector": {"matchLabels": dict(PART_OF), "matchExpressions": [own_jobs]},
        "policyTypes": ["Ingress"],
    }
    assert not manifests(plan("existing", facts=EXISTING_CLUSTER, jobs=[]), POLICY)
    own = {m["metadata"]["name"]: m for m in manifests(plan("dev"), POLICY)}
    assert own[DEFAULT_DENY_POLICY]["spec"] == {"podSelector": {}, "policyTypes": ["Ingress"]}


def test_the_hf_token_secret_carries_the_stacks_name_in_a_namespace_it_does_not_own():
    """The owner's namespace may hold a Secret `hf-token` of its own: the stack's is
    `trainstack-<stack>-hf-token` there, and every job reads that one."""
    for stack, facts, name in (
        ("existing", EXISTING_CLUSTER, "trainstack-existing-hf-token"),
        ("dev", None, "hf-token"),
    ):
        values = stack_values(stack, hfToken="hf_test")
        run = run_program(stack, values, ["trainstack:hfToken"], facts=facts)
        assert {m["metadata"]["name"] for m in manifests(run, "kubernetes:core/v1:Secret")} >= {name}, stack
        refs = set()
        for reg in (r for t in JOB_TYPES for r in run.by_type(t)):
            refs |= hf_token_refs(manifest_of(reg)[1])
        assert refs == {name}, (stack, refs)


JOB_TYPES = ("kubernetes:kubeflow.org/v1:PyTorchJob", "kubernetes:trainer.kubeflow.org/v1alpha1:TrainJob")


def hf_token_refs(node: Any) -> set[str]:
    """The Secrets every HF_TOKEN reference under `node` names."""
    if isinstance(node, list):
        return set().union(*(hf_token_refs(n) for n in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    ref = node.get("secretKeyRef")
    found = {ref["name"]} if isinstance(ref, dict) and ref.get("key") == "HF_TOKEN" else set()
    return found.union(*(hf_token_refs(v) for v in node.values()))
