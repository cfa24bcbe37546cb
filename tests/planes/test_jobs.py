"""Training jobs under the mock engine: manifests validated strictly against the upstream CRDs and
Kubernetes schemas, values derived from the node group, waiting, secrets, ordering, relaunch."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpath_rfc9535 as jsonpath
import kubernetes_validate
import pytest
from support.crds import CRD_FILES, crd_errors
from support.manifests import env_of, worker_container, worker_pod
from support.plans import plan, stack_values

from components.job_pods import EFA_ENV, GPU_ENV, TERMINATION_GRACE_SECONDS
from components.jobs import WAIT_FOR, wait_annotations
from config.schema import ConfigError
from offline.engine import SECRET_MASK, run_program
from offline.plan import manifest_of

PYTORCHJOB = "kubernetes:kubeflow.org/v1:PyTorchJob"
RAYJOB = "kubernetes:ray.io/v1:RayJob"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
HF_TOKEN = "hf_offlineSECRETtoken"
SECRET_ENV = "wandb-offline-secret"


def groups() -> list[dict]:
    return [
        {"name": "gpu", "instanceType": "g6.xlarge"},
        {"name": "p5", "instanceType": "p5.48xlarge", "nodeCount": 2, "efa": True},
        {"name": "p4d", "instanceType": "p4d.24xlarge", "nodeCount": 2, "efa": True, "preflight": False},
    ]


def all_kinds_jobs() -> list[dict]:
    return [
        {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "p5", "nodes": 2, "model": "1b", "steps": 500},
        {"name": "a100", "kind": "PyTorchJob", "nodeGroup": "p4d", "nodes": 2, "wait": "succeeded"},
        {"name": "ray-l4", "kind": "RayJob", "nodeGroup": "gpu", "env": {"WANDB_API_KEY": SECRET_ENV}},
        {"name": "ray-box", "kind": "RayCluster", "nodeGroup": "gpu", "wait": "none"},
        {"name": "cpu-smoke", "kind": "PyTorchJob", "nodeGroup": "system", "nodes": 2, "steps": 20},
    ]


@pytest.fixture(scope="module")
def kinds_plan():
    values = stack_values("dev", gpuNodeGroups=groups(), jobs=all_kinds_jobs())
    values["trainstack:hfToken"] = HF_TOKEN
    # `jobs` set with a nested secure value is a secret key as a whole, as in the Pulumi CLI.
    return run_program("dev", values, ["trainstack:hfToken", "trainstack:jobs"])


def job(run, name: str):
    (found,) = [r for r in run.resources if r.name == f"job-{name}" and r.custom]
    return found


def body(reg) -> dict[str, Any]:
    return manifest_of(reg)[1]


# --- strict schemas ----------------------------------------------------------------------------


def kubernetes_manifests(run) -> list[dict]:
    found = []
    for reg in run.resources:
        m = manifest_of(reg)
        if m and "apiVersion" in m[1]:
            found.append(m[1])
    return found


@pytest.mark.parametrize("stack", ["dev", "prod", "kinds"])
def test_every_manifest_validates_strictly(stack, dev_plan, prod_plan, kinds_plan):
    run = {"dev": dev_plan, "prod": prod_plan, "kinds": kinds_plan}[stack]
    manifests = kubernetes_manifests(run)
    kinds = {m["kind"] for m in manifests}
    assert {"PyTorchJob", "Namespace", "ServiceAccount"} <= kinds
    for m in manifests:
        if m["kind"] in CRD_FILES:
            assert crd_errors(m) == [], m["metadata"]["name"]
        else:
            if m["kind"] == "Secret" and m.get("stringData") == SECRET_MASK:
                # pulumi-kubernetes makes all of stringData secret: the plan shows it masked whole.
                m = {**m, "stringData": {}}
            kubernetes_validate.validate(m, "1.33", strict=True)
    assert {
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "AdmissionCheck",
        "ProvisioningRequestConfig",
    } <= kinds
    if stack == "kinds":
        assert {"RayJob", "RayCluster", "Secret"} <= kinds


def test_strict_validation_catches_a_misspelt_field(kinds_plan):
    m = copy.deepcopy(body(job(kinds_plan, "fsdp")))
    m["spec"]["nprocPerNod"] = m["spec"].pop("nprocPerNode")
    worker = m["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["tolerationz"] = worker.pop("tolerations")
    errors = crd_errors(m)
    assert any("nprocPerNod" in e for e in errors) and any("tolerationz" in e for e in errors)
    account = copy.deepcopy(
        next(x for x in kubernetes_manifests(kinds_plan) if x["kind"] == "ServiceAccount")
    )
    account["automountServiceAccountTokn"] = False
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(account, "1.33", strict=True)
    queue = copy.deepcopy(next(x for x in kubernetes_manifests(kinds_plan) if x["kind"] == "ClusterQueue"))
    queue["spec"]["queueingStrategy"] = "FIFO"
    queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuotta"] = "1"
    errors = crd_errors(queue)
    assert any("FIFO" in e for e in errors) and any("nominalQuotta" in e for e in errors)


# --- derived from the node group ------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "gpus", "efa"), [("fsdp", "8", "32"), ("a100", "8", "4"), ("ray-l4", "1", None)]
)
def test_gpu_and_efa_counts_come_from_the_instance_type(kinds_plan, name, gpus, efa):
    resources = worker_container(body(job(kinds_plan, name)))["resources"]
    devices = {"nvidia.com/gpu": gpus, **({"vpc.amazonaws.com/efa": efa} if efa else {})}
    assert resources["limits"] == devices
    assert {k: resources["requests"][k] for k in devices} == devices  # requests = limits
    if not efa:
        assert "vpc.amazonaws.com/efa" not in resources["requests"]


def test_torchrun_gets_one_process_per_gpu_and_the_node_count(kinds_plan):
    spec = body(job(kinds_plan, "fsdp"))["spec"]
    assert spec["nprocPerNode"] == "8"  # a string in the v1.9.4 schema
    assert spec["elasticPolicy"] == {
        "rdzvBackend": "c10d",
        "minReplicas": 2,
        "maxReplicas": 2,
        "maxRestarts": 10,
        # Survivors wait for a lost node's replacement past torch's 600 s default.
        "rdzvConf": [{"key": "join_timeout", "value": "1800"}],
    }
    worker = spec["pytorchReplicaSpecs"]["Worker"]
    # Exit codes 1-127 (a failed node check) fail the job; a signal (128+) restarts the pod.
    assert worker["replicas"] == 2 and worker["restartPolicy"] == "ExitCode"
    container = worker["template"]["spec"]["containers"][0]
    assert container["name"] == "pytorch"
    assert container["command"] == ["python", "-m", "trainer.launch", "-m", "trainer.train"]
    assert container["args"][:4] == ["--model", "1b", "--steps", "500"]


def test_ray_workers_get_their_gpus(kinds_plan):
    spec = body(job(kinds_plan, "ray-l4"))["spec"]
    (group,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert group["rayStartParams"] == {"num-gpus": "1"}
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 1)
    assert spec["entrypoint"].startswith("python -m trainer.ray_train --num-workers 1 --use-gpu --model tiny")
    assert spec["submissionMode"] == "K8sJobMode"
    assert spec["shutdownAfterJobFinishes"] is True and spec["backoffLimit"] == 2
    head = spec["rayClusterSpec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # no work on the head
    assert head["template"]["spec"]["nodeSelector"] == {"trainstack.dev/role": "system"}


def test_efa_environment_only_on_efa_groups(kinds_plan):
    fsdp, l4, cpu = (env_of(body(job(kinds_plan, n))) for n in ("fsdp", "ray-l4", "cpu-smoke"))
    assert {k: fsdp[k] for k in EFA_ENV} == EFA_ENV
    assert "NCCL_PROTO" not in fsdp and "FI_EFA_USE_DEVICE_RDMA" not in fsdp  # stale for current aws-ofi-nccl
    assert not set(EFA_ENV) & set(l4)
    assert {k: l4[k] for k in GPU_ENV} == GPU_ENV
    assert not (set(EFA_ENV) | set(GPU_ENV)) & set(cpu)


def test_placement_selectors_tolerations_requests_and_shm(kinds_plan):
    pod = worker_pod(body(job(kinds_plan, "fsdp")))
    # Exactly its Kueue flavor's node labels: Kueue's injection at admission adds nothing.
    assert pod["nodeSelector"] == {"trainstack.dev/role": "gpu", "trainstack.dev/node-group": "p5"}
    gpu, *node_loss = pod["tolerations"]
    assert gpu == {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    # Off a lost node in 60 s (Kubernetes' default is 300 s), so its replacement starts sooner.
    assert {(t["key"], t["effect"], t["tolerationSeconds"]) for t in node_loss} == {
        ("node.kubernetes.io/unreachable", "NoExecute", 60),
        ("node.kubernetes.io/not-ready", "NoExecute", 60),
    }
    assert pod["serviceAccountName"] == "trainer"
    assert pod["terminationGracePeriodSeconds"] >= 300  # the trainer saves on SIGTERM
    requests = pod["containers"][0]["resources"]["requests"]
    assert (requests["cpu"], requests["memory"]) == (
        "182",
        "1842Gi",
    )  # 192 vCPU / 2048 GiB, less the daemons'
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "256Gi"}
    small = worker_pod(body(job(kinds_plan, "ray-l4")))["containers"][0]["resources"]["requests"]
    assert (small["cpu"], small["memory"]) == ("3", "13Gi")  # g6.xlarge: 4 vCPU, 16 GiB
    cpu = worker_pod(body(job(kinds_plan, "cpu-smoke")))
    assert cpu["nodeSelector"] == {"trainstack.dev/role": "system"}
    # Half of an m6i.large (2 vCPU, 8 GiB): the operators and Ray heads share the system nodes.
    assert cpu["containers"][0]["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}
    assert [t["effect"] for t in cpu["tolerations"]] == ["NoExecute", "NoExecute"]  # no GPU taint
    assert "limits" not in cpu["containers"][0]["resources"]
    assert body(job(kinds_plan, "cpu-smoke"))["spec"]["nprocPerNode"] == "1"


def test_checkpoints_go_to_a_volume_and_the_stack_bucket(kinds_plan):
    bucket = kinds_plan.outputs["bucketName"]
    args = worker_container(body(job(kinds_plan, "fsdp")))["args"]
    assert args[args.index("--checkpoint-dir") + 1] == "/checkpoints"
    assert args[args.index("--s3-checkpoints") + 1] == f"s3://{bucket}/checkpoints/fsdp/"
    mounts = {m["mountPath"] for m in worker_container(body(job(kinds_plan, "fsdp")))["volumeMounts"]}
    assert {"/checkpoints", "/dev/shm"} <= mounts
    assert (
        f"--s3-checkpoints s3://{bucket}/checkpoints/ray-l4/"
        in body(job(kinds_plan, "ray-l4"))["spec"]["entrypoint"]
    )


def test_image_is_the_stack_build_pinned_by_digest_unless_named(kinds_plan):
    image = worker_container(body(job(kinds_plan, "fsdp")))["image"]
    assert image == kinds_plan.outputs["imageUri"] and "@sha256:" in image
    run = plan("dev", jobs=[{"name": "mine", "kind": "PyTorchJob", "nodeGroup": "gpu", "image": "repo/x:1"}])
    assert worker_container(body(job(run, "mine")))["image"] == "repo/x:1"


def test_user_command_and_args(dev_plan):
    run = plan(
        "dev",
        jobs=[
            {
                "name": "custom",
                "kind": "PyTorchJob",
                "nodeGroup": "gpu",
                "command": ["python", "-m", "my.train"],
                "args": ["--lr", "1e-4"],
            }
        ],
    )
    container = worker_container(body(job(run, "custom")))
    assert (container["command"], container["args"]) == (["python", "-m", "my.train"], ["--lr", "1e-4"])


# --- waiting ---------------------------------------------------------------------------------


def wait_satisfied(expression: str, obj: dict) -> bool:
    """pulumi-kubernetes' waitFor semantics: condition=<Type>[=<Status>], jsonpath={...}[=value]."""
    if expression.startswith("condition="):
        kind, _, status = expression.removeprefix("condition=").partition("=")
        conditions = obj.get("status", {}).get("conditions", [])
        return any(c["type"] == kind and c["status"] == (status or "True") for c in conditions)
    path, sep, value = expression.removeprefix("jsonpath=").partition("}=")
    found = jsonpath.find("$" + path.strip("{}"), obj).values()
    # kubectl's jsonpath prints JSON scalars: false, not Python's False.
    text = json.dumps(found[0]) if found and isinstance(found[0], bool) else str(found[0]) if found else ""
    return bool(found) and (not sep or text == value)


def cond(**types: str) -> dict:
    return {"status": {"conditions": [{"type": t, "status": s} for t, s in types.items()]}}


SAMPLES = {
    "PyTorchJob": {
        "created": cond(Created="True"),
        "running": cond(Created="True", Running="True"),
        "succeeded": cond(Created="True", Running="False", Succeeded="True"),
        "failed": cond(Created="True", Running="False", Failed="True"),
    },
    "RayJob": {
        "created": {"status": {"jobStatus": "PENDING", "jobDeploymentStatus": "Initializing"}},
        "running": {"status": {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running"}},
        "succeeded": {"status": {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete"}},
        "failed": {"status": {"jobStatus": "FAILED", "jobDeploymentStatus": "Failed"}},
    },
    "RayCluster": {
        "created": {
            "status": {"state": "", "conditions": [{"type": "RayClusterProvisioned", "status": "False"}]}
        },
        "running": {
            "status": {"state": "ready", "conditions": [{"type": "RayClusterProvisioned", "status": "True"}]}
        },
    },
}


@pytest.mark.parametrize(
    ("kind", "wait", "ready_in"),
    [
        # A job that finished before the watch saw it running still counts as running.
        ("PyTorchJob", "running", {"running", "succeeded"}),
        ("PyTorchJob", "succeeded", {"succeeded"}),
        ("RayJob", "running", {"running", "succeeded"}),
        ("RayJob", "succeeded", {"succeeded"}),
        ("RayCluster", "running", {"running"}),
    ],
)
def test_wait_for_expressions_per_kind_and_mode(kind, wait, ready_in):
    expression = wait_annotations(kind, wait)["pulumi.com/waitFor"]
    assert {state for state, obj in SAMPLES[kind].items() if wait_satisfied(expression, obj)} == ready_in


@pytest.mark.parametrize("kind", ["PyTorchJob", "RayJob", "RayCluster"])
def test_wait_admitted_is_kueue_resuming_the_job(kind):
    """Kueue's webhook suspends a queued job at creation; it sets suspend false once the whole
    job is admitted (and its nodes exist, on an autoscaled group)."""
    expression = wait_annotations(kind, "admitted")["pulumi.com/waitFor"]

    def job(suspend: bool) -> dict:
        return {"spec": {"runPolicy": {"suspend": suspend}} if kind == "PyTorchJob" else {"suspend": suspend}}

    assert not wait_satisfied(expression, job(True))
    assert wait_satisfied(expression, job(False))
    assert not wait_satisfied(expression, {"spec": {}})  # not yet seen by Kueue's webhook


def test_wait_none_skips_await_and_timeouts_follow_config(kinds_plan):
    assert body(job(kinds_plan, "ray-box"))["metadata"]["annotations"] == {"pulumi.com/skipAwait": "true"}
    assert body(job(kinds_plan, "a100"))["metadata"]["annotations"] == {
        "pulumi.com/waitFor": WAIT_FOR[("PyTorchJob", "succeeded")]
    }
    # p5 is autoscaled: `pulumi up` waits the autoscaler's node provisioning limit (30) on top.
    assert job(kinds_plan, "fsdp").options["customTimeouts"] == {
        "create": "90m",
        "update": "90m",
        "delete": "15m",
    }
    fixed = plan("dev", operators={"clusterAutoscaler": {"enabled": False}})
    assert job(fixed, "llama-tiny").options["customTimeouts"]["create"] == "30m"


def test_a_job_is_relaunched_by_replacement_under_its_fixed_name(kinds_plan):
    for name in ("fsdp", "ray-l4", "ray-box"):
        reg = job(kinds_plan, name)
        assert reg.options["replaceOnChanges"] == ["spec"] and reg.options["deleteBeforeReplace"] is True
        assert body(reg)["metadata"]["name"] == name  # fixed: a relaunch reuses the checkpoint prefix


def test_a_config_change_changes_only_that_jobs_spec():
    jobs = [
        {"name": "a", "kind": "PyTorchJob", "nodeGroup": "gpu", "steps": 100, "wait": "none"},
        {"name": "b", "kind": "PyTorchJob", "nodeGroup": "gpu", "steps": 100, "wait": "none"},
    ]
    before = plan("dev", jobs=jobs)
    after = plan("dev", jobs=[{**jobs[0], "steps": 200}, jobs[1]])
    assert body(job(before, "a"))["spec"] != body(job(after, "a"))["spec"]
    assert body(job(before, "b")) == body(job(after, "b"))


# --- secrets -----------------------------------------------------------------------------------


def test_hf_token_and_secret_env_reach_jobs_through_secrets(kinds_plan):
    env = env_of(body(job(kinds_plan, "ray-l4")))
    assert env["HF_TOKEN"] == {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}
    assert env["WANDB_API_KEY"] == {"secretKeyRef": {"name": "ray-l4-env", "key": "WANDB_API_KEY"}}
    secrets = {r.inputs["metadata"]["name"]: r for r in kinds_plan.by_type("kubernetes:core/v1:Secret")}
    # pulumi-kubernetes keeps all of stringData secret, so the plan masks it whole.
    assert secrets["hf-token"].inputs["stringData"] == SECRET_MASK
    assert secrets["ray-l4-env"].inputs["stringData"] == SECRET_MASK


def test_no_secret_appears_in_plain_text(kinds_plan, tmp_path):
    from offline.plan import write_plan

    write_plan(kinds_plan, tmp_path)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert HF_TOKEN not in text and SECRET_ENV not in text, path
    assert HF_TOKEN not in json.dumps(kinds_plan.outputs, default=str)


def test_hf_token_must_be_a_secret():
    values = {**stack_values("dev"), "trainstack:hfToken": HF_TOKEN}
    with pytest.raises(ConfigError) as err:
        run_program("dev", values)
    assert "trainstack:hfToken" in str(err.value) and HF_TOKEN not in str(err.value)


# --- ordering ------------------------------------------------------------------------------------


def names(run, urns: list[str]) -> set[str]:
    by_urn = {r.urn: r.name for r in run.resources}
    return {by_urn[u] for u in urns if u in by_urn}


def test_jobs_wait_for_their_operator_queue_device_plugins_and_image(kinds_plan):
    fsdp = names(kinds_plan, job(kinds_plan, "fsdp").dependencies)
    assert {
        "operators-training-operator",
        "gpu-p5",
        "localqueue-p5",
        "nvidia-device-plugin",
        "aws-efa-k8s-device-plugin",
        "training-pods-association",
    } <= fsdp
    assert "image-build" in fsdp  # the image URI comes from the build
    ray = names(kinds_plan, job(kinds_plan, "ray-l4").dependencies)
    assert {"kuberay-operator", "gpu-gpu", "localqueue-gpu", "hf-token", "ray-l4-env"} <= ray
    cpu = names(kinds_plan, job(kinds_plan, "cpu-smoke").dependencies)
    assert {"eks-system", "localqueue-system"} <= cpu and not {"gpu-p5", "gpu-gpu", "gpu-p4d"} & cpu


def test_jobs_on_a_checked_group_check_their_own_nodes_before_step_0(kinds_plan):
    """Nodes come and go with the autoscaler, so a stack-time preflight cannot see them: each job's
    default trainer checks the nodes it got (devices, NCCL over EFA, bus bandwidth) first."""
    check = [
        "--preflight-gpus-per-node",
        "8",
        "--preflight-efa-per-node",
        "32",
        "--preflight-min-bus-bandwidth",
        "200",  # half of 3200 Gbps, in GB/s
    ]
    args = worker_container(body(job(kinds_plan, "fsdp")))["args"]
    assert " ".join(check) in " ".join(args)
    for name in ("a100", "ray-l4", "cpu-smoke"):  # p4d turned it off; gpu has no EFA; CPU
        assert "--preflight-efa-per-node" not in json.dumps(body(job(kinds_plan, name))["spec"]), name
    assert kinds_plan.by_type("kubernetes:batch/v1:Job") == []  # no separate preflight Job
    run = plan("prod", gpuNodeGroups=[{**groups()[1], "preflightMinBusBandwidthGBps": 300}])
    ray = body(job(run, "llama-1b-ray"))["spec"]["entrypoint"]
    assert "--preflight-efa-per-node 32 --preflight-min-bus-bandwidth 300" in ray


def test_the_time_to_training_chain_ends_at_a_job(prod_plan):
    from offline.timeline import critical_path, until_training

    chain = critical_path(prod_plan.resources, until_training(prod_plan.resources))
    long = [s.name for s in chain if s.minutes >= 1]
    # p5 starts empty: its nodes come with the job (in the job's own minutes), not before it.
    assert long[:2] == ["eks", "eks-system"] and "gpu-p5" not in long
    assert chain[-1].type in (PYTORCHJOB, RAYJOB)


# --- outputs and validation ------------------------------------------------------------------------


def test_outputs_describe_each_job(kinds_plan):
    jobs = kinds_plan.outputs["jobs"]
    assert jobs["fsdp"]["gpus"] == 16 and jobs["fsdp"]["nodes"] == 2
    assert jobs["fsdp"]["hourlyUsd"] == 110.08
    assert jobs["fsdp"]["watch"] == "kubectl -n training get pytorchjob fsdp -w"
    assert "training.kubeflow.org/job-name=fsdp" in jobs["fsdp"]["logs"]
    assert jobs["ray-box"]["dashboard"] == "kubectl -n training port-forward svc/ray-box-head-svc 8265:8265"
    assert jobs["cpu-smoke"]["gpus"] == 0
    assert kinds_plan.outputs["gpusTotal"] == 1 + 16 + 16


def config_problems(**overrides) -> list[str]:
    with pytest.raises(ConfigError) as err:
        plan("dev", **overrides)
    return [str(p) for p in err.value.problems]


def test_jobs_that_cannot_run_are_config_errors():
    (msg,) = config_problems(jobs=[{"name": "big", "kind": "PyTorchJob", "nodeGroup": "gpu", "nodes": 2}])
    assert msg.startswith(
        "trainstack:jobs[0].nodes = 2: job 'big' can never be admitted by queue 'gpu': "
        "node group 'gpu' holds 1 node(s) at most, and the job needs cpu 6 > 3 on flavor trainstack-gpu;"
    )
    assert msg.endswith("nvidia.com/gpu 2 > 1 on flavor trainstack-gpu; allowed: 1-1, or a larger node group")
    (msg,) = config_problems(jobs=[{"name": "r" * 48, "kind": "RayJob", "nodeGroup": "gpu"}])
    assert "at most 47 characters" in msg
    (msg,) = config_problems(
        operators={"kuberay": {"enabled": False}},
        jobs=[{"name": "r", "kind": "RayCluster", "nodeGroup": "gpu"}],
    )
    assert msg.startswith('trainstack:jobs[0].kind = "RayCluster": operators.kuberay is turned off')
    (msg,) = config_problems(jobs=[{"name": "x", "kind": "PyTorchJob", "nodeGroup": "system", "nodes": 3}])
    assert "the system node group holds 2 node(s) at most" in msg
    # Two jobs that cannot run at once are fine: Kueue admits one whole, then the other.
    both = [{"name": n, "kind": "PyTorchJob", "nodeGroup": "gpu"} for n in ("a", "b")]
    assert len(plan("dev", jobs=both).by_type(PYTORCHJOB)) == 2


def test_a_gpu_group_cannot_be_named_system():
    problems = config_problems(gpuNodeGroups=[{"name": "system", "instanceType": "g6.xlarge"}], jobs=[])
    assert any(p.startswith('trainstack:gpuNodeGroups[0].name = "system": reserved') for p in problems)


# --- redeploys while a job trains -----------------------------------------------------------------


def minutes(timeout: str) -> int:
    assert timeout.endswith("m")
    return int(timeout[:-1])


def test_deleting_any_job_waits_out_its_pods_grace_period(kinds_plan, prod_plan):
    """pulumi-kubernetes deletes in the foreground, 10 minutes by default; training pods get
    TERMINATION_GRACE_SECONDS to save and upload, and the operator tears down after that."""
    kinds = {r.type.rsplit(":", 1)[1]: r for r in (*kinds_plan.resources, *prod_plan.resources) if r.custom}
    for kind in ("PyTorchJob", "RayJob", "RayCluster"):
        assert (
            minutes(kinds[kind].options["customTimeouts"]["delete"]) * 60 >= TERMINATION_GRACE_SECONDS + 300
        )


def test_a_changed_secret_value_relaunches_the_job_before_its_secret_goes(kinds_plan):
    """A Secret's data cannot change in place (pulumi-kubernetes replaces it, delete-first under its
    fixed name). The job must go down before it, and come back with the new values."""
    secret = kinds_plan.one("kubernetes:core/v1:Secret", "ray-l4-env")
    hf = kinds_plan.one("kubernetes:core/v1:Secret", "hf-token")
    ray_l4 = job(kinds_plan, "ray-l4")
    assert ray_l4.urn in kinds_plan.taken_down_first(secret.urn)
    assert {job(kinds_plan, n).urn for n in ("fsdp", "a100", "ray-l4", "ray-box")} <= set(
        kinds_plan.taken_down_first(hf.urn)
    )
    env = body(ray_l4)["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0][
        "env"
    ]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in env if "valueFrom" in e}
    assert refs == {"HF_TOKEN": "hf-token", "WANDB_API_KEY": "ray-l4-env"}
