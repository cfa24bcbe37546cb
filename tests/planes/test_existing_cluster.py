"""trainstack on a cluster it did not create: an existing EKS cluster by name, and kind through a
kubeconfig file (the `local` template). Offline plans: nothing of the cluster is created, the
Kubernetes provider comes from the named cluster, jobs select the described nodes and validate
against the CRDs. A config that cannot work there is refused with its key:
tests/config/test_existing_cluster_rules.py."""

from __future__ import annotations

import json
import subprocess

import pytest
from support.crds import crd_errors
from support.manifests import worker_pod
from support.paths import ROOT
from support.plans import EXISTING_CLUSTER as CLUSTER
from support.plans import plan, policy_of, stack_values

from account_checks import AccountCheckError
from conventions import STACK_LABEL
from domain.operators import RELEASES
from offline.engine import SECRET_MASK, run_program
from offline.plan import manifest_of
from offline.scheduling import JOB_TYPES, referenced_objects

# What only a stack that creates its cluster registers.
CREATED_ONLY = (
    "aws:ec2/",
    "aws:eks/cluster",
    "aws:eks/nodeGroup",
    "aws:eks/addon",
    "aws:autoscaling/",
    "eks:index:",
)


@pytest.fixture(scope="module")
def existing_plan():
    return plan("existing", facts=CLUSTER)


@pytest.fixture(scope="module")
def local_plan():
    return plan("local")


def jobs_of(run) -> list[dict]:
    return [manifest_of(r)[1] for t in JOB_TYPES for r in run.by_type(t)]


def test_an_existing_eks_cluster_gets_no_vpc_cluster_or_node_group(existing_plan):
    made = sorted({r.type for r in existing_plan.resources if r.type.startswith(CREATED_ONLY)})
    assert made == []
    assert "trainstack:compute:Cluster" not in {r.type for r in existing_plan.resources}
    # The stack's own AWS pieces stay: its bucket, registry and image build.
    assert existing_plan.by_type("aws:s3/bucket:Bucket") and existing_plan.by_type(
        "aws:ecr/repository:Repository"
    )


def test_the_provider_reaches_the_named_eks_cluster(existing_plan):
    provider = existing_plan.one("pulumi:providers:kubernetes", "existing-cluster-k8s")
    assert provider.inputs["kubeconfig"] == SECRET_MASK
    config = json.loads(provider.revealed["kubeconfig"])
    (cluster,) = config["clusters"]
    assert cluster["name"] == "ml-platform" and cluster["cluster"]["server"].endswith(".eks.amazonaws.com")
    exec_ = config["users"][0]["user"]["exec"]
    assert exec_["command"] == "aws"
    assert exec_["args"] == [
        "--region",
        "us-east-1",
        "eks",
        "get-token",
        "--cluster-name",
        "ml-platform",
        "--output",
        "json",
    ]
    assert existing_plan.outputs["clusterName"] == "ml-platform"


def test_jobs_select_the_described_nodes_and_validate(existing_plan):
    (job,) = jobs_of(existing_plan)
    pod = worker_pod(job)
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    # GPUs and EFA still derived from the instance type.
    assert pod["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "8",
        "vpc.amazonaws.com/efa": "32",
    }
    assert crd_errors(job) == []
    for r in existing_plan.resources:
        if r.type.startswith("kubernetes:kueue.x-k8s.io/"):
            assert crd_errors(manifest_of(r)[1]) == [], r.name
    flavor = manifest_of(
        existing_plan.one("kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor", "resourceflavor-trainstack-p5")
    )[1]
    assert flavor["spec"]["nodeLabels"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    system = manifest_of(
        existing_plan.one(
            "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor", "resourceflavor-trainstack-system"
        )
    )[1]
    assert system["spec"]["nodeLabels"] == {"eks.amazonaws.com/nodegroup": "system"}
    # Operators on the described system nodes.
    kuberay = existing_plan.one("kubernetes:helm.sh/v3:Release", "kuberay-operator")
    assert kuberay.inputs["values"]["nodeSelector"] == {"eks.amazonaws.com/nodegroup": "system"}


def test_a_ray_head_takes_the_system_flavor_where_node_labels_share_no_key():
    """Described nodes carry the owner's labels, not the stack's role label: the system flavor comes
    first in a GPU queue, so a head fits it and a GPU pod (no GPU quota there) moves on."""
    run = plan(
        "existing",
        facts=CLUSTER,
        jobs=[{"name": "ray", "kind": "RayJob", "nodeGroup": "p5", "nodes": 2}],
    )
    queue = manifest_of(
        run.one("kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue", "clusterqueue-trainstack-p5")
    )[1]
    flavors = [f["name"] for f in queue["spec"]["resourceGroups"][0]["flavors"]]
    assert flavors == ["trainstack-existing-system", "trainstack-existing-p5"]  # the stack's name in them
    system = {
        r["name"]: r["nominalQuota"] for r in queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    }
    # Two nodes: a RayJob head (500m) and its submitter (500m) each.
    assert system["nvidia.com/gpu"] == "0" and system["cpu"] == "2" and system["memory"] == "8Gi"


def test_training_pods_get_the_bucket_through_pod_identity_on_the_named_cluster(existing_plan):
    """Each job's own account and role (tests/planes/test_pod_identity.py), or the role the user
    brings (podRoleArn) for every job's account."""
    assocs = existing_plan.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    jobs = [
        r.name.removeprefix("job-") for r in existing_plan.resources if r.name.startswith("job-") and r.custom
    ]
    assert sorted(
        (a.inputs["clusterName"], a.inputs["namespace"], a.inputs["serviceAccount"]) for a in assocs
    ) == sorted(("ml-platform", "training", f"job-{j}") for j in jobs)
    policy = policy_of(existing_plan, f"training-pods-{jobs[0]}-policy")
    assert policy["Statement"][0]["Sid"] == "ListOwnCheckpointsAndDatasets"
    brought = plan(
        "existing",
        facts=CLUSTER,
        existingCluster={
            "eksClusterName": "ml-platform",
            "podRoleArn": "arn:aws:iam::123456789012:role/ml-training",
            "systemNodes": {"nodeSelector": {"pool": "system"}},
        },
    )
    assert not [r for r in brought.by_type("aws:iam/role:Role") if r.name.startswith("training-pods")]
    roles = {
        a.inputs["roleArn"] for a in brought.by_type("aws:eks/podIdentityAssociation:PodIdentityAssociation")
    }
    assert roles == {"arn:aws:iam::123456789012:role/ml-training"}
    assert brought.outputs["trainingRoleArn"] == "arn:aws:iam::123456789012:role/ml-training"


def test_account_checks_on_an_existing_cluster_stop_before_anything_is_created():
    registered = []
    with pytest.raises(AccountCheckError) as err:
        run_program("existing", stack_values("existing"), facts={}, registered=registered)
    assert (
        "trainstack:existingCluster.eksClusterName = ml-platform: no EKS cluster of that name in us-east-1"
        in str(err.value)
    )
    assert [r.type for r in registered] == ["pulumi:providers:aws"]
    without_agent = {"eks-cluster:ml-platform": {**CLUSTER["eks-cluster:ml-platform"], "addons": ["vpc-cni"]}}
    with pytest.raises(AccountCheckError) as err:
        plan("existing", facts=without_agent)
    assert "aws eks create-addon --cluster-name ml-platform --addon-name eks-pod-identity-agent" in str(
        err.value
    )


def plan_command(stack: str, out) -> subprocess.CompletedProcess:
    """`make plan STACK=<stack>`, in this process (the command's own code, without a new Python)."""
    import contextlib
    import io

    from offline.plan import main

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["--stack", stack, "--out", str(out)])
    assert code == 0, stderr.getvalue()
    return subprocess.CompletedProcess(["make", "plan"], code, stdout.getvalue(), stderr.getvalue())


def test_the_existing_plan_prints_checks_that_apply_and_no_hourly_cost(tmp_path):
    proc = plan_command("existing", tmp_path)
    assert "ok    EKS cluster: needs ml-platform in us-east-1" in proc.stdout
    assert "quota" not in proc.stdout.split("Account checks")[1].split("Estimated")[0]
    assert (
        "Estimated cost while idle: nothing hourly; the cluster and its nodes are its owner's" in proc.stdout
    )
    proc = plan_command("local", tmp_path)
    assert "Account checks: none; a kubeconfig stack uses no AWS account." in proc.stdout
    assert "the stack adds no AWS at all" in proc.stdout


# --- kind ------------------------------------------------------------------------------------------


def test_a_local_stack_uses_no_aws_at_all(local_plan):
    assert [r.type for r in local_plan.resources if r.type.startswith(("aws:", "pulumi:providers:aws"))] == []
    provider = local_plan.one("pulumi:providers:kubernetes", "existing-cluster-k8s")
    assert (
        provider.inputs["kubeconfig"].endswith("/.kube/config")
        and provider.inputs["context"] == "kind-trainstack"
    )
    assert local_plan.outputs["kubeconfigFile"] == provider.inputs["kubeconfig"]
    assert local_plan.outputs["kubeContext"] == "kind-trainstack"
    assert "kubeconfig" not in local_plan.outputs  # the user's file stays theirs


def test_the_local_image_is_built_by_docker_and_loaded_into_kind(local_plan):
    image = local_plan.one("docker:index/image:Image")
    assert image.inputs["skipPush"] is True and image.inputs["imageName"].startswith("trainstack:build-")
    load = local_plan.one("command:local:Command")
    assert load.inputs["create"] == f"kind load docker-image {image.inputs['imageName']} --name trainstack"
    for job in jobs_of(local_plan):
        pod = worker_pod(job, referenced_objects(local_plan))
        assert pod["containers"][0]["image"] == image.inputs["imageName"]
    for r in [r for t in JOB_TYPES for r in local_plan.by_type(t)]:
        assert load.urn in r.dependencies or any(
            load.urn in deps for deps in r.property_dependencies.values()
        ), r.name


def test_local_jobs_are_cpu_jobs_with_checkpoints_on_the_nodes_shared_path(local_plan):
    jobs = {j["metadata"]["name"]: j for j in jobs_of(local_plan)}
    assert {n: j["kind"] for n, j in jobs.items()} == {"tiny-fsdp": "TrainJob", "tiny-ray": "RayJob"}
    for name, job in jobs.items():
        assert crd_errors(job) == [], name
        pod = worker_pod(job, referenced_objects(local_plan))
        assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
        assert "nvidia.com/gpu" not in json.dumps(pod)
        (volume,) = [v for v in pod["volumes"] if v["name"] == "checkpoints"]
        (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "checkpoints"]
        # A TrainJob's runtime mounts the nodes' directory, the job its own in it (the sub-path).
        where = "/".join([volume["hostPath"]["path"], *([mount["subPath"]] if "subPath" in mount else [])])
        assert (where, volume["hostPath"]["type"]) == (f"/var/local/trainstack/{name}", "DirectoryOrCreate")
        assert "--s3-checkpoints" not in json.dumps(job["spec"])
    # No GPU nodes, no device plugin to install; the operators the jobs need are there.
    releases = {r.inputs["name"] for r in local_plan.by_type("kubernetes:helm.sh/v3:Release")}
    assert releases == {"kuberay-operator", "kueue", "kubeflow-trainer"}
    assert local_plan.by_type("kubernetes:kustomize/v2:Directory")


def test_only_the_stacks_own_namespaces_and_objects_are_touched(local_plan, existing_plan):
    """A cluster the stack did not create: it adds its releases and named objects; it never edits
    what is there (its namespace is a patch that sets nothing; the only other patches label its own
    Helm releases' Secrets with its name; no object in another team's namespace)."""
    own_secrets = {(c.namespace, f"sh.helm.release.v1.{c.release}.v1") for c in RELEASES.values()}
    for run in (local_plan, existing_plan):
        for r in run.resources:
            if not r.custom or not r.type.startswith("kubernetes:") or r.type.startswith("kubernetes:helm"):
                continue
            if r.type.endswith(("Directory", "ConfigGroup")):  # upstream operator manifests, at a pin
                continue
            meta = r.inputs.get("metadata") or {}
            if r.type == "kubernetes:core/v1:NamespacePatch":
                assert r.inputs == {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "training"}}
                continue
            if r.type == "kubernetes:core/v1:SecretPatch":
                assert (meta["namespace"], meta["name"]) in own_secrets
                assert set(r.inputs) == {"apiVersion", "kind", "metadata"} and set(meta) == {
                    "name",
                    "namespace",
                    "labels",
                }
                assert meta["labels"] == {STACK_LABEL: run.stack}
                continue
            assert "Patch" not in r.type, r.type
            namespace = meta.get("namespace")
            assert namespace in (None, "training"), (r.type, namespace)
            if namespace is None:
                assert meta["name"].startswith("trainstack-") or meta["name"] == "trainstack-provisioning", (
                    meta
                )
        for r in run.by_type("kubernetes:helm.sh/v3:Release"):
            assert r.inputs["namespace"] in (
                "kube-system",
                "kuberay-system",
                "kueue-system",
                "kubeflow-system",
            ), r.name


def test_kubeconfig_stacks_can_keep_checkpoints_in_s3_with_the_users_secret():
    run = plan(
        "local",
        existingCluster={
            "kubeconfig": "~/.kube/config",
            "context": "kind-trainstack",
            "kindClusterName": "trainstack",
            "s3": {"uri": "s3://team-ckpt/trainstack", "credentialsSecret": "s3-creds"},
            "systemNodes": {"cpus": 4, "memoryGiB": 8, "count": 2},
        },
    )
    (job,) = [j for j in jobs_of(run) if j["kind"] == "TrainJob"]
    container = worker_pod(job, referenced_objects(run))["containers"][0]
    args = container["args"]
    assert args[args.index("--s3-checkpoints") + 1] == "s3://team-ckpt/trainstack/checkpoints/tiny-fsdp/"
    env = {e["name"]: e.get("valueFrom") for e in container["env"]}
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}}
    assert [r.type for r in run.resources if r.type.startswith("aws:")] == []


def test_the_kind_config_matches_the_local_stack():
    """The kind cluster `make kind-cluster` creates is the one Pulumi.local.yaml describes: its
    workers mount one host directory at the checkpoint path, as many as systemNodes.count."""
    import yaml

    kind = yaml.safe_load((ROOT / "kind-config.yaml").read_text())
    local = yaml.safe_load((ROOT / "Pulumi.local.yaml").read_text())["config"]
    existing = local["trainstack:existingCluster"]
    workers = [n for n in kind["nodes"] if n["role"] == "worker"]
    assert len(workers) == existing["systemNodes"]["count"]
    for w in workers:
        (mount,) = w["extraMounts"]
        assert mount == {"hostPath": "@CHECKPOINTS@", "containerPath": existing["checkpointHostPath"]}
    assert existing["context"] == f"kind-{existing['kindClusterName']}"  # kind names contexts so
    makefile = (ROOT / "Makefile").read_text()
    assert f"KIND_CLUSTER ?= {existing['kindClusterName']}" in makefile
