"""`make plan`: the offline plan CLI, its files, their shape and the dependency edges."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.paths import ROOT
from support.plans import stack_values

from offline.engine import run_program
from offline.plan import write_plan
from offline.stack_file import read_stack_file


def run_plan(tmp_path: Path, stack: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "offline.plan", "--stack", stack, "--out", str(tmp_path), *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


# One worker runs the module, so each template's `make plan` (a process of its own, seconds of CPU)
# runs once for all the tests that read it.
pytestmark = pytest.mark.xdist_group("cli-plans")


@pytest.fixture(scope="module")
def cli_plans(tmp_path_factory):
    """`make plan` of a template, run once for every test of the module that reads it."""
    runs: dict[str, tuple[str, subprocess.CompletedProcess, Path]] = {}

    def planned_once(stack: str) -> tuple[str, subprocess.CompletedProcess, Path]:
        if stack not in runs:
            out = tmp_path_factory.mktemp(f"plan-{stack}")
            runs[stack] = (stack, run_plan(out, stack), out / stack)
        return runs[stack]

    return planned_once


@pytest.fixture(params=["dev", "prod"])
def planned(request, cli_plans):
    return cli_plans(request.param)


def test_plan_exits_zero_and_writes_files(planned):
    stack, proc, out = planned
    assert proc.returncode == 0, proc.stderr
    assert (out / "resources.json").is_file()
    assert (out / "outputs.json").is_file()
    prod = stack == "prod"
    group = "p5" if prod else "gpu"
    expected = sorted(
        [
            "admissioncheck-trainstack-provisioning.yaml",
            # The health gate (components/health_gate.py): passive on dev's g6, burnIn on prod's p5;
            # its burn-in pods and floors in the training namespace, its Events where a Node's go.
            "clusterrole-trainstack-health-gate.yaml",
            "clusterrolebinding-trainstack-health-gate.yaml",
            "deployment-training-trainstack-health-gate.yaml",
            "networkpolicy-training-trainstack-burn-in.yaml",  # its burn-in pods reach each other
            "role-default-trainstack-health-gate.yaml",
            "rolebinding-default-trainstack-health-gate.yaml",
            "role-training-trainstack-health-gate.yaml",
            "rolebinding-training-trainstack-health-gate.yaml",
            "serviceaccount-training-trainstack-health-gate.yaml",
            # The hung-node fence (components/node_fence.py); its Events go where a Node's do.
            "clusterrole-trainstack-node-fence.yaml",
            "clusterrolebinding-trainstack-node-fence.yaml",
            "deployment-training-trainstack-node-fence.yaml",
            "role-default-trainstack-node-fence.yaml",
            "rolebinding-default-trainstack-node-fence.yaml",
            "serviceaccount-training-trainstack-node-fence.yaml",
            f"clusterqueue-trainstack-{group}.yaml",
            "clusterqueue-trainstack-system.yaml",
            f"clustertrainingruntime-trainstack-{group}.yaml",
            "configgroup-operators-kuberay-crds.yaml",
            "configgroup-queueing-provisioning-request-crd.yaml",
            *(["helm-aws-efa-k8s-device-plugin.yaml"] if prod else []),
            "helm-cluster-autoscaler.yaml",
            "helm-kubeflow-trainer.yaml",
            "helm-kuberay-operator.yaml",
            "helm-kueue.yaml",
            "helm-nvidia-device-plugin.yaml",
            *(
                ["job-training-llama-1b-fsdp-driver.yaml", "job-training-llama-1b-ray-driver.yaml"]
                if prod
                else ["job-training-llama-tiny-driver.yaml"]
            ),
            "kustomize-operators-training-operator.yaml",
            f"localqueue-training-{group}.yaml",
            "localqueue-training-system.yaml",
            "namespace-training.yaml",
            "networkpolicy-training-default-deny-ingress.yaml",
            *(
                [
                    "networkpolicy-training-job-llama-1b-fsdp.yaml",
                    "networkpolicy-training-job-llama-1b-ray-dashboard.yaml",
                    "networkpolicy-training-job-llama-1b-ray.yaml",
                ]
                if prod
                else ["networkpolicy-training-job-llama-tiny.yaml"]
            ),
            "provisioningrequestconfig-trainstack-provisioning.yaml",
            *(["trainjob-training-llama-1b-fsdp.yaml"] if prod else ["trainjob-training-llama-tiny.yaml"]),
            *(["rayjob-training-llama-1b-ray.yaml"] if prod else []),
            f"resourceflavor-trainstack-{group}.yaml",
            *(["topology-trainstack-network-3.yaml"] if prod else []),
            "resourceflavor-trainstack-system.yaml",
            *(
                [
                    "serviceaccount-training-job-llama-1b-fsdp.yaml",
                    "serviceaccount-training-job-llama-1b-ray.yaml",
                ]
                if prod
                else ["serviceaccount-training-job-llama-tiny.yaml"]
            ),
        ]
    )
    assert sorted(p.name for p in (out / "manifests").iterdir()) == expected
    release = yaml.safe_load((out / "manifests" / "helm-kuberay-operator.yaml").read_text())
    assert release == {
        "helmRelease": "kuberay-operator",
        "namespace": "kuberay-system",
        "chart": "kuberay-operator",
        "repository": "https://ray-project.github.io/kuberay-helm/",
        "version": "1.7.0",
        "values": {"nodeSelector": {"trainstack.dev/role": "system"}},
    }
    assert "Estimated first `pulumi up`: ~" in proc.stdout
    assert f"Offline plan of stack '{stack}'" in proc.stdout
    # The answer first, on one screen: the tree and the count by type only with --details.
    assert "Resources by type:" not in proc.stdout and "--details" in proc.stdout
    assert proc.stdout.index("Jobs (") < proc.stdout.index("Estimated cost while idle")
    assert "Estimated cost while idle, no job admitted" in proc.stdout
    # The idle figure per 30 days, for each stack (docs/queueing.md's table quotes these).
    idle = "$0.43/hour ($307 per 30 days)" if prod else "$0.34/hour ($243 per 30 days)"
    assert f"idle total: {idle}" in proc.stdout


def test_a_successful_plan_prints_nothing_on_stderr(tmp_path, cli_plans):
    """Three plans, the module's two and one more: a warning printed only now and then (at exit,
    by a task or an event loop left open) shows in one of them."""
    for stack, proc, out in [
        cli_plans("dev"),
        cli_plans("prod"),
        ("dev", run_plan(tmp_path, "dev"), tmp_path / "dev"),
    ]:
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
        # ... and it did plan: the summary on stdout, the resources written.
        assert proc.stdout.startswith(f"Offline plan of stack '{stack}': "), proc.stdout[:200]
        written = json.loads((out / "resources.json").read_text())
        assert any(r["type"] == "eks:index:Cluster" for r in written)


def test_resources_json_shape(planned):
    stack, _, out = planned
    resources = json.loads((out / "resources.json").read_text())
    assert isinstance(resources, list) and resources
    urns = {r["urn"] for r in resources}
    for r in resources:
        assert set(r) == {
            "urn",
            "type",
            "name",
            "parent",
            "custom",
            "inputs",
            "dependencies",
            "propertyDependencies",
            "transforms",
            "options",
        }
        assert r["urn"].startswith("urn:pulumi:") and r["urn"].endswith(f"::{r['name']}")
        assert r["parent"] is None or r["parent"] in urns
        assert isinstance(r["custom"], bool)
        assert set(r["dependencies"]) <= urns, f"{r['name']} depends on an unregistered resource"
        assert r["parent"] not in r["dependencies"]
    components = [r for r in resources if not r["custom"] and r["type"].startswith("trainstack:")]
    assert {c["type"] for c in components} == {
        "trainstack:storage:ArtifactBucket",
        "trainstack:build:ImageRegistry",
        "trainstack:build:ImageBuild",
        "trainstack:health:HealthGate",
        "trainstack:network:Network",
        "trainstack:compute:Cluster",
        "trainstack:compute:GpuNodeGroup",
        "trainstack:operators:ClusterOperators",
        "trainstack:queueing:Queueing",
        "trainstack:jobs:TrainJob",
        "trainstack:jobs:TrainingRuntime",
        "trainstack:jobs:DriverProbe",
        *(["trainstack:jobs:RayJob"] if stack == "prod" else []),
        "trainstack:compute:TrainingPodIdentity",
        "trainstack:compute:JobIdentity",
        "trainstack:network_policy:NamespacePolicies",
        "trainstack:compute:ClusterAutoscalerIdentity",
        "trainstack:health:NodeFence",
    }


def test_secrets_are_masked(planned):
    _, _, out = planned
    resources = json.loads((out / "resources.json").read_text())
    (provider,) = [r for r in resources if r["type"] == "pulumi:providers:kubernetes"]
    assert provider["inputs"]["kubeconfig"] == "[secret]"
    assert "get-token" not in (out / "resources.json").read_text()
    assert json.loads((out / "outputs.json").read_text())["kubeconfig"] == "[secret]"


def test_manifests_are_what_the_cluster_receives(planned):
    stack, _, out = planned
    job = "llama-1b-fsdp" if stack == "prod" else "llama-tiny"  # each job its own account
    sa = yaml.safe_load((out / "manifests" / f"serviceaccount-training-job-{job}.yaml").read_text())
    assert sa["apiVersion"] == "v1" and sa["kind"] == "ServiceAccount"
    assert sa["metadata"]["namespace"] == "training"


def test_dependency_edges(planned):
    stack, _, out = planned
    resources = json.loads((out / "resources.json").read_text())
    by_name = {(r["type"], r["name"]): r for r in resources}

    def deps(type_, name):
        return {u.rsplit("::", 1)[1] for u in by_name[(type_, name)]["dependencies"]}

    assert {"image-project", "image-context"} <= deps("pulumi-python:dynamic:Resource", "image-build")
    assert "image-codebuild" in deps("aws:codebuild/project:Project", "image-project")
    assert "eks" in deps("eks:index:ManagedNodeGroup", "eks-system")
    assert {"eks", "eks-system"} <= deps("aws:eks/addon:Addon", "eks-eks-pod-identity-agent")
    assert "eks" in deps("pulumi:providers:kubernetes", "eks-k8s")
    assert "eks-k8s" in deps("kubernetes:core/v1:Namespace", "training-pods-namespace")
    job = "llama-1b-fsdp" if stack == "prod" else "llama-tiny"
    assert {"eks-eks-pod-identity-agent", f"training-pods-{job}-role"} <= deps(
        "aws:eks/podIdentityAssociation:PodIdentityAssociation", f"training-pods-{job}-association"
    )
    assert "artifacts-versioning" in deps(
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "artifacts-lifecycle"
    )


def test_prod_plan_shows_efa_node_groups(cli_plans):
    _, proc, out = cli_plans("prod")
    assert proc.returncode == 0, proc.stderr
    resources = json.loads((out / "resources.json").read_text())
    (ng,) = [r for r in resources if r["type"] == "eks:index:ManagedNodeGroup" and r["name"] == "gpu-p5"]
    dep_names = {u.rsplit("::", 1)[1] for u in ng["dependencies"]}
    assert {"eks", "gpu-p5-lt"} <= dep_names
    assert "eks-system" not in dep_names  # GPU nodes join in parallel with the system nodes
    (lt,) = [
        r
        for r in resources
        if r["type"] == "aws:ec2/launchTemplate:LaunchTemplate" and r["name"] == "gpu-p5-lt"
    ]
    assert {"gpu-p5-efa", "gpu-p5-placement"} <= {u.rsplit("::", 1)[1] for u in lt["dependencies"]}
    # Idle, prod costs its non-GPU floor; each job adds its two p5 nodes while it runs.
    assert "idle total: $0.43/hour ($307 per 30 days)" in proc.stdout
    assert "2 node(s) of p5 (queue p5), 16 GPUs, adds 2 node(s), +$110.08/h while it runs" in proc.stdout


def write_stack_file(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def test_bad_config_exits_nonzero_without_traceback(tmp_path):
    stack_file = write_stack_file(
        tmp_path / "Pulumi.badcfg.yaml",
        {
            "aws:region": "us-east-1",
            "trainstack:gpuNodeGroups": [{"name": "gpu", "instanceType": "g6.xlarge", "efa": True}],
        },
    )
    proc = run_plan(tmp_path, "badcfg", "--stack-file", str(stack_file))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "trainstack:gpuNodeGroups[0].efa = true: g6.xlarge has no EFA interfaces" in proc.stderr
    assert not (tmp_path / "badcfg").exists()


def test_missing_stack_file(tmp_path):
    proc = run_plan(tmp_path, "nosuchstack")
    assert proc.returncode == 1
    assert "no stack file" in proc.stderr and "Pulumi.nosuchstack.yaml" in proc.stderr


def test_stack_file_secrets_stay_secret(tmp_path):
    path = write_stack_file(
        tmp_path / "Pulumi.x.yaml",
        {"aws:region": "us-east-1", "trainstack:tags": {"owner": {"secure": "v1:abc"}}, "plain": True},
    )
    values, secret_keys = read_stack_file(path)
    assert secret_keys == ["trainstack:tags"]
    assert json.loads(values["trainstack:tags"]) == {"owner": "[secret]"}
    assert values["trainstack:plain"] == "true"


def test_offline_engine_answers_the_provider_invokes(tmp_path):
    from offline.engine import ACCOUNT_ID, run_program

    program = tmp_path / "program.py"
    program.write_text(
        """
import pulumi
import pulumi_aws as aws

pulumi.export("zones", aws.get_availability_zones(state="available").names[:2])
pulumi.export("account", aws.get_caller_identity().account_id)
pulumi.export("partition", aws.get_partition().partition)
pulumi.export("region", aws.get_region().region)
pulumi.export("ami", aws.ssm.get_parameter(name="/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/nvidia/recommended/image_id").value)
p5 = aws.ec2.get_instance_type(instance_type="p5.48xlarge")
pulumi.export("p5", [p5.efa_maximum_interfaces, p5.maximum_network_cards, p5.gpuses[0].count, p5.gpuses[0].name])
pulumi.export("p5_zones", aws.ec2.get_instance_type_offerings(
    location_type="availability-zone", filters=[{"name": "instance-type", "values": ["p5.48xlarge"]}]).locations)
pulumi.export("subnet_zone", aws.ec2.get_subnet(id="subnet-0123456789abcdef1").availability_zone)
"""
    )
    run = run_program("t", {"aws:region": "eu-west-1"}, program=program)
    assert run.outputs["zones"] == ["eu-west-1a", "eu-west-1b"]
    assert run.outputs["account"] == ACCOUNT_ID
    assert run.outputs["partition"] == "aws"
    assert run.outputs["region"] == "eu-west-1"
    assert run.outputs["ami"].startswith("ami-0")
    assert run.outputs["p5"] == [32, 32, 8, "H100"]
    assert run.outputs["p5_zones"] == ["eu-west-1c", "eu-west-1d", "eu-west-1f"]
    assert run.outputs["subnet_zone"] == "eu-west-1b"  # odd last digit: AZ b


def test_prod_plan_lists_its_template_values(cli_plans):
    _, proc, _ = cli_plans("prod")
    assert proc.returncode == 0, proc.stderr
    assert (
        "Template values: a live `pulumi up` of 'prod' refuses them until they are replaced:" in proc.stdout
    )
    assert 'trainstack:cluster.publicAccessCidrs[0] = "203.0.113.0/24"' in proc.stdout
    assert "pulled from Docker Hub anonymously" in proc.stdout


def test_offline_engine_names_an_unanswered_invoke(tmp_path):
    from offline.engine import run_program

    program = tmp_path / "program.py"
    program.write_text("import pulumi_aws as aws\naws.ec2.get_vpc(default=True)\n")
    with pytest.raises(
        Exception,
        match=r"no answer for invoke aws:ec2/getVpc:getVpc; add one to offline/engine/aws_answers\.py",
    ):
        run_program("t", {"aws:region": "us-east-1"}, program=program)


def test_the_same_config_plans_to_the_same_bytes(tmp_path):
    """Two runs register concurrently in different orders; the files a reviewer diffs must not."""
    written = []
    for attempt in ("first", "second"):
        out = tmp_path / attempt
        write_plan(run_program("prod", stack_values("prod")), out)
        written.append({p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()})
    first, second = written
    assert len(first) > 10 and first == second


def test_details_add_the_resource_tree_and_the_count_by_type_after_the_answer(tmp_path, capsys):
    from offline.plan import main

    assert main(["--stack", "dev", "--out", str(tmp_path), "--details"]) == 0
    out = capsys.readouterr().out
    assert out.index("Jobs (") < out.index("Resource tree:") < out.index("Resources by type:")
    assert "  pulumi:providers:aws  aws\n" in out and "--details (make plan" not in out
