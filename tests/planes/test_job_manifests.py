"""Training jobs under the mock engine, what the manifests say: validated strictly against the
upstream CRDs and Kubernetes schemas, values derived from the node group, secrets, outputs."""

from __future__ import annotations

import copy
import json

import kubernetes_validate
import pytest
from support.crds import CRD_FILES, crd_errors
from support.jobs import HF_TOKEN, SECRET_ENV, body, job
from support.manifests import env_of, worker_container, worker_pod
from support.plans import plan

from components.jobs.pods import EFA_ENV, GPU_ENV, launcher_shutdown_seconds
from domain.stop_grace import CEILING_S
from offline.engine import SECRET_MASK
from offline.plan import manifest_of

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
    assert {"TrainJob", "ClusterTrainingRuntime", "Namespace", "ServiceAccount"} <= kinds
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
    # A rank's NCCL error or timeout ends it without ncclCommAbort (3, SkipCleanUp), which can
    # hang on a wedged link; torchrun restarts it.
    assert l4["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == fsdp["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    # Flight-recorder dumps on the checkpoint volume, not in the pod's /tmp: the restarted trainer
    # finds them and uploads them to S3 (trainer.debug_dumps).
    mounts = {m["mountPath"] for m in worker_container(body(job(kinds_plan, "fsdp")))["volumeMounts"]}
    assert "/checkpoints" in mounts
    assert fsdp["TORCH_FR_DUMP_TEMP_FILE"] == "/checkpoints/flight-recorder/nccl_trace_rank_"


def test_a_drains_save_ends_inside_the_pods_grace_period(kinds_plan):
    """After the kubelet's SIGTERM, torchrun (the pod's PID 1) waits this long for its workers to
    save and exit before it SIGKILLs them (torch's default: 30 s); the kubelet SIGKILLs the pod at
    the grace period, so torchrun's wait ends before it, with time for torchrun to exit retryable."""
    fsdp = body(job(kinds_plan, "fsdp"))
    shutdown = int(env_of(fsdp)["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"])
    grace = worker_pod(fsdp)["terminationGracePeriodSeconds"]
    assert shutdown == launcher_shutdown_seconds(grace) < grace
    assert 150 <= grace <= CEILING_S  # sized to the group's stop (tests/planes/test_stop_grace.py)
    # Ray's pods run no torchrun.
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in env_of(body(job(kinds_plan, "ray-l4")))


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
    assert pod["serviceAccountName"] == "job-fsdp"  # its own (tests/planes/test_pod_identity.py)
    assert pod["terminationGracePeriodSeconds"] >= 150  # the trainer saves on SIGTERM
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


# --- outputs and validation ------------------------------------------------------------------------


def test_outputs_describe_each_job(kinds_plan):
    jobs = kinds_plan.outputs["jobs"]
    assert jobs["fsdp"]["gpus"] == 16 and jobs["fsdp"]["nodes"] == 2
    assert jobs["fsdp"]["hourlyUsd"] == 110.08
    assert jobs["fsdp"]["watch"] == "kubectl -n training get pytorchjob fsdp -w"
    assert "training.kubeflow.org/job-name=fsdp" in jobs["fsdp"]["logs"]
    assert jobs["ray-box"]["dashboard"] == "kubectl -n training port-forward svc/ray-box-head-svc 8265:8265"
    assert jobs["cpu-smoke"]["gpus"] == 0
    assert kinds_plan.outputs["gpusTotal"] == 2 + 16 + 16
