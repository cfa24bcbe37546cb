"""The tracking plane under the mock engine: an MLflow server the stack runs (PostgreSQL in the
cluster or on RDS, artifacts in the bucket), or a server the user names; what jobs are given."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest
from support.manifests import env_of
from support.plans import plan, policy_of, stack_values

from components.image import context_archive, sha256
from components.tracking import ALLOWED_HOSTS, MLFLOW_IMAGE, PORT_FORWARD, POSTGRES_IMAGE, TRACKING_URI
from offline.cost import hourly_cost
from offline.engine import SECRET_MASK, run_program
from offline.plan import manifest_of
from offline.timeline import critical_path, until_training
from planes.tracking import SERVER_CONTEXT

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
RDS = "aws:rds/instance:Instance"
JOBS = [
    {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "gpu", "wait": "none"},
    {"name": "ray", "kind": "RayJob", "nodeGroup": "gpu", "wait": "none"},
]


@pytest.fixture(scope="module")
def in_cluster():
    return plan("dev", tracking={"mode": "server", "experiment": "llama"}, jobs=JOBS)


@pytest.fixture(scope="module")
def on_rds():
    return plan("prod", tracking={"mode": "server", "server": {"database": "rds", "storageGiB": 50}})


def server_pod(run) -> dict:
    return run.one(DEPLOYMENT, "tracking-server").inputs["spec"]["template"]["spec"]


def job_pod_env(run, name: str) -> dict:
    (reg,) = [r for r in run.resources if r.name == f"job-{name}" and r.custom]
    return env_of(manifest_of(reg)[1])


def server_env(run) -> dict:
    return {e["name"]: e for e in server_pod(run)["containers"][0]["env"]}


def test_the_server_runs_the_image_the_stack_built_on_system_nodes_installing_nothing(in_cluster):
    pod = server_pod(in_cluster)
    assert pod["nodeSelector"] == {"trainstack.dev/role": "system"}
    assert "initContainers" not in pod
    (server,) = pod["containers"]
    # images/mlflow as the stack's pipeline pushed it to its own repository, by digest.
    repo = in_cluster.one("aws:ecr/repository:Repository", "mlflow").inputs["name"]
    assert repo == "trainstack/dev/mlflow"
    assert server["image"].startswith(f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{repo}@sha256:")
    project = in_cluster.one("aws:codebuild/project:Project", "mlflow-image-project").inputs
    build_env = {e["name"]: e["value"] for e in project["environment"]["environmentVariables"]}
    assert build_env["BASE_IMAGE"] == MLFLOW_IMAGE == "ghcr.io/mlflow/mlflow:v3.17.2"
    assert build_env["CONTEXT_HASH"] == sha256(context_archive(SERVER_CONTEXT))
    deps = in_cluster.one(DEPLOYMENT, "tracking-server").dependencies
    assert any(d.endswith("::mlflow-image-build") for d in deps)
    assert "PYTHONPATH" not in server_env(in_cluster)
    assert "pip" not in json.dumps(pod)
    args = server["args"]
    assert args[0] == "--app-name=basic-auth"
    # The password comes from the Secret at start (Kubernetes expands $(DB_PASSWORD)), never the spec,
    # and through the environment, never the command line.
    env = server_env(in_cluster)
    assert env["DB_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "mlflow-db", "key": "password"}
    assert (
        env["MLFLOW_BACKEND_STORE_URI"]["value"]
        == "postgresql://mlflow:$(DB_PASSWORD)@mlflow-postgres.mlflow.svc.cluster.local:5432/mlflow"
    )
    assert not [a for a in [*server["command"], *args] if "postgresql" in a or "PASSWORD" in a]
    bucket = in_cluster.outputs["bucketName"]
    assert f"--artifacts-destination=s3://{bucket}/mlflow/" in args
    assert server["readinessProbe"]["httpGet"]["path"] == "/health"
    for m in (
        manifest_of(r)[1]
        for r in in_cluster.resources
        if r.type.startswith("kubernetes:") and r.parent and "tracking" in r.urn
    ):
        if m.get("kind") == "Secret":
            assert m["stringData"] == SECRET_MASK
            m = {**m, "stringData": {}}
        kubernetes_validate.validate(m, "1.33", strict=True)


def test_the_server_answers_its_service_names_and_a_port_forward():
    """MLflow refuses Host headers outside its allowed list; ours is checked with MLflow's own rule."""
    pytest.importorskip("mlflow")
    from mlflow.server.security_utils import is_allowed_host_header

    allowed = ALLOWED_HOSTS.split(",")
    assert is_allowed_host_header(allowed, "mlflow.mlflow.svc.cluster.local:5000")
    assert is_allowed_host_header(allowed, "localhost:5000")  # kubectl port-forward
    assert not is_allowed_host_header(allowed, "evil.example.com")
    assert TRACKING_URI == "http://mlflow.mlflow.svc.cluster.local:5000"
    assert PORT_FORWARD == "kubectl -n mlflow port-forward svc/mlflow 5000:5000"


def test_its_identity_reaches_only_the_artifact_prefix(in_cluster):
    statements = policy_of(in_cluster, "tracking-policy")["Statement"]
    assert [s["Resource"] for s in statements if "s3:PutObject" in s["Action"]] == [
        f"arn:aws:s3:::{in_cluster.outputs['bucketName']}/mlflow/*"
    ]
    listing = next(s for s in statements if s["Action"] == ["s3:ListBucket"])
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["mlflow/*"]}}
    assoc = in_cluster.one("aws:eks/podIdentityAssociation:PodIdentityAssociation", "tracking-association")
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == ("mlflow", "mlflow")


def test_the_in_cluster_database_keeps_its_volume(in_cluster):
    addon = in_cluster.one("aws:eks/addon:Addon", "tracking-ebs-csi-driver")
    assert addon.inputs["addonName"] == "aws-ebs-csi-driver"
    attach = in_cluster.one("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "tracking-ebs-csi-policy")
    assert attach.inputs["policyArn"].endswith(":policy/service-role/AmazonEBSCSIDriverPolicy")
    assoc = in_cluster.one(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", "tracking-ebs-csi-association"
    )
    assert (assoc.inputs["namespace"], assoc.inputs["serviceAccount"]) == (
        "kube-system",
        "ebs-csi-controller-sa",
    )
    sc = in_cluster.one("kubernetes:storage.k8s.io/v1:StorageClass", "tracking-gp3").inputs
    assert (sc["reclaimPolicy"], sc["parameters"]["encrypted"], sc["volumeBindingMode"]) == (
        "Retain",
        "true",
        "WaitForFirstConsumer",
    )
    sts = in_cluster.one("kubernetes:apps/v1:StatefulSet", "tracking-postgres").inputs["spec"]
    (claim,) = sts["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert sts["template"]["spec"]["containers"][0]["image"] == POSTGRES_IMAGE
    assert not in_cluster.by_type(RDS)


def test_jobs_get_the_uri_the_experiment_and_their_identity(in_cluster):
    for name in ("fsdp", "ray"):
        env = job_pod_env(in_cluster, name)
        assert env["MLFLOW_TRACKING_URI"] == TRACKING_URI
        assert env["MLFLOW_EXPERIMENT_NAME"] == f"llama/{name}"  # its own: MLflow grants per experiment
        assert (env["TRAINSTACK_JOB"], env["TRAINSTACK_STACK"]) == (name, "dev")
        assert "@sha256:" in env["TRAINSTACK_IMAGE"]
    assert in_cluster.outputs["trackingUri"] == TRACKING_URI
    assert in_cluster.outputs["trackingPortForward"] == PORT_FORWARD
    # Jobs do not wait for the server: a trainer without its server trains on.
    (reg,) = [r for r in in_cluster.resources if r.name == "job-fsdp" and r.custom]
    server = in_cluster.one(DEPLOYMENT, "tracking-server").urn
    assert server not in reg.dependencies


def test_rds_is_private_encrypted_and_protected_in_a_protected_stack(on_rds):
    db = on_rds.one(RDS, "tracking-db")
    i = db.inputs
    assert (i["engine"], i["engineVersion"], i["autoMinorVersionUpgrade"]) == ("postgres", "17", True)
    assert i["storageEncrypted"] is True and i["publiclyAccessible"] is False
    assert (i["allocatedStorage"], i["instanceClass"]) == (50, "db.t4g.micro")
    assert (
        i["deletionProtection"] is True and i["skipFinalSnapshot"] is False and i["finalSnapshotIdentifier"]
    )
    assert db.options.get("protect") is True
    sg = on_rds.one("aws:ec2/securityGroup:SecurityGroup", "tracking-db-sg").inputs
    (rule,) = sg["ingress"]
    assert (rule["fromPort"], rule["toPort"], len(rule["securityGroups"])) == (5432, 5432, 1)
    assert "cidrBlocks" not in rule
    assert ".rds.amazonaws.com:5432/mlflow" in server_env(on_rds)["MLFLOW_BACKEND_STORE_URI"]["value"]
    assert not on_rds.by_type("kubernetes:apps/v1:StatefulSet")


def test_the_database_costs_appear_and_stay_off_the_path_to_training(on_rds):
    from config import parse_config

    cfg = parse_config(
        "prod", stack_values("prod", tracking={"mode": "server", "server": {"database": "rds"}})
    )
    lines = {line.item: line for line in hourly_cost(cfg, __import__("datetime").date(2026, 11, 23))}
    assert lines["db.t4g.micro (RDS PostgreSQL for MLflow)"].unit_usd == 0.016
    assert lines["GiB of RDS gp3 (MLflow's database)"].quantity == 20
    path = [s.name for s in critical_path(on_rds.resources, until_training(on_rds.resources))]
    assert "tracking-db" not in path


def test_an_external_server_gets_its_credentials_through_a_secret():
    values = stack_values(
        "dev", tracking={"mode": "external", "uri": "https://mlflow.example.com"}, jobs=JOBS
    )
    values["trainstack:trackingToken"] = "mlflow-offline-token"
    run = run_program("dev", values, ["trainstack:trackingToken"])
    env = job_pod_env(run, "fsdp")
    assert env["MLFLOW_TRACKING_URI"] == "https://mlflow.example.com"
    assert env["MLFLOW_EXPERIMENT_NAME"] == "dev"  # the stack's name by default
    assert env["MLFLOW_TRACKING_TOKEN"] == {
        "secretKeyRef": {"name": "mlflow-credentials", "key": "MLFLOW_TRACKING_TOKEN"}
    }
    assert not run.by_type(DEPLOYMENT) or all("tracking" not in r.name for r in run.by_type(DEPLOYMENT))
    assert "mlflow-offline-token" not in json.dumps([r.inputs for r in run.resources], default=str)
    assert "trackingPortForward" not in run.outputs


def test_a_second_run_registers_the_same_tracking_inputs(in_cluster):
    again = plan("dev", tracking={"mode": "server", "experiment": "llama"}, jobs=JOBS)
    first = {r.urn: r.inputs for r in in_cluster.resources if "tracking" in r.urn}
    assert first == {r.urn: r.inputs for r in again.resources if "tracking" in r.urn}


def test_every_aws_resource_goes_through_the_stacks_provider(in_cluster, on_rds):
    """The stack's explicit AWS provider (region, profile), never a default one; pulumi-eks's own
    children are its provider's business."""
    for run in (in_cluster, on_rds):
        by_urn = {r.urn: r for r in run.resources}
        (provider,) = [r.urn for r in run.resources if r.type == "pulumi:providers:aws"]
        inside_eks = {
            r.urn for r in run.resources if by_urn.get(r.parent) and by_urn[r.parent].type.startswith("eks:")
        }
        default = [
            r.name
            for r in run.resources
            if r.type.startswith("aws:")
            and r.custom
            and r.urn not in inside_eks
            and provider not in r.dependencies
        ]
        assert default == []
