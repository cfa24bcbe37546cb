"""VERL jobs: the RayJob the stack derives (image, runtime env, data, sizes, tracking) and the
dataset preparation in VERL's format. The checks that refuse a group that cannot hold one are in
tests/config/test_job_rules.py."""

from __future__ import annotations

import json
import shlex

import pytest
from support.crds import crd_errors
from support.manifests import env_of
from support.plans import plan
from support.verl import GRPO, L4, P5

from offline.plan import manifest_of


def ray_job(run, name: str) -> dict:
    (reg,) = [r for r in run.resources if r.name == f"job-{name}" and r.custom]
    return manifest_of(reg)[1]


def overrides(manifest: dict) -> dict[str, str]:
    parts = shlex.split(manifest["spec"]["entrypoint"])
    assert parts[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    return dict(p.split("=", 1) for p in parts[3:])


@pytest.fixture(scope="module")
def verl_plan():
    ppo = {
        **GRPO,
        "name": "ppo-p5",
        "nodeGroup": "p5",
        "verl": {"algorithm": "ppo", "model": "Qwen/Qwen2.5-7B-Instruct", "tensorParallel": 2},
    }
    box = {"name": "verl-box", "kind": "RayCluster", "nodeGroup": "gpu", "wait": "none", "verl": {}}
    return plan("dev", gpuNodeGroups=[L4, P5], jobs=[GRPO, ppo, box], tracking={"mode": "server"})


def test_a_grpo_rayjob_gets_what_verl_needs_from_its_group(verl_plan):
    m = ray_job(verl_plan, "grpo")
    assert crd_errors(m) == []
    o = overrides(m)
    assert o["algorithm.adv_estimator"] == "grpo" and o["actor_rollout_ref.actor.use_kl_loss"] == "True"
    assert (o["trainer.n_gpus_per_node"], o["trainer.nnodes"]) == ("1", "2")  # g6.xlarge: one L4
    assert o["actor_rollout_ref.model.path"] == "Qwen/Qwen2.5-0.5B-Instruct"
    assert o["trainer.default_local_dir"] == "/checkpoints/grpo" and o["trainer.resume_mode"] == "auto"
    assert o["data.train_files"] == "/data/gsm8k/train.parquet"
    # VERL's project is the MLflow experiment: the job's own, the only one its MLflow user may edit.
    assert o["trainer.logger"] == "['console','mlflow']" and o["trainer.project_name"] == "dev/grpo"
    # Nothing installed when the job starts: verl is baked into the stack's VERL image.
    runtime = json.loads(m["spec"]["runtimeEnvYAML"])
    assert runtime == {"env_vars": {"TOKENIZERS_PARALLELISM": "true", "VLLM_LOGGING_LEVEL": "WARN"}}
    (workers,) = m["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert workers["rayStartParams"] == {"num-gpus": "1"}
    pod = workers["template"]["spec"]
    image = pod["containers"][0]["image"]  # the stack's VERL image, by digest, not upstream's
    assert image.startswith(verl_plan.outputs["repositoryUrl"] + "@sha256:")
    (prep,) = pod["initContainers"]
    assert prep["command"] == [
        "python",
        "-m",
        "trainer.verl_data",
        "--dataset",
        "gsm8k",
        "--out",
        "/data/gsm8k",
    ]
    assert "@sha256:" in prep["image"] and prep["image"] != image  # the stack's training image
    mounts = {v["mountPath"] for v in pod["containers"][0]["volumeMounts"]}
    assert {"/data", "/checkpoints", "/dev/shm"} <= mounts
    env = env_of(m)
    assert env["MLFLOW_TRACKING_URI"].startswith("http://mlflow.")


def test_ppo_adds_a_critic_and_an_efa_group_its_network(verl_plan):
    m = ray_job(verl_plan, "ppo-p5")
    assert crd_errors(m) == []
    o = overrides(m)
    assert o["algorithm.adv_estimator"] == "gae" and o["critic.model.path"] == "Qwen/Qwen2.5-7B-Instruct"
    assert (o["trainer.n_gpus_per_node"], o["actor_rollout_ref.rollout.tensor_model_parallel_size"]) == (
        "8",
        "2",
    )
    (workers,) = m["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    env = {e["name"]: e.get("value") for e in workers["template"]["spec"]["containers"][0]["env"]}
    assert env["FI_PROVIDER"] == "efa"
    limits = workers["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == ("8", "32")


def test_a_verl_raycluster_has_its_data_and_no_entrypoint(verl_plan):
    m = ray_job(verl_plan, "verl-box")
    assert m["kind"] == "RayCluster" and crd_errors(m) == []
    (workers,) = m["spec"]["workerGroupSpecs"]
    assert workers["template"]["spec"]["initContainers"][0]["name"] == "prepare-data"


def test_gsm8k_is_written_in_verls_format(tmp_path):

    import datasets
    import pyarrow.parquet as pq
    from trainer import verl_data

    split = {
        "question": [
            "Tom has 3 apples and buys 4. How many?",
            "A farm sells 1,200 eggs a day. How many in 2 days?",
        ],
        "answer": ["3 + 4 = 7\n#### 7", "1200 * 2 = 2400\n#### 2,400"],
    }
    fake = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(split), "test": datasets.Dataset.from_dict(split)}
    )
    assert verl_data.prepare("gsm8k", tmp_path, load=lambda: fake) == {"train": 2, "test": 2}
    rows = pq.read_table(tmp_path / "train.parquet").to_pylist()
    assert rows[1]["data_source"] == "openai/gsm8k" and rows[1]["ability"] == "math"
    assert rows[1]["reward_model"] == {"style": "rule", "ground_truth": "2400"}
    assert rows[0]["prompt"] == [
        {"role": "user", "content": f"{split['question'][0]} {verl_data.INSTRUCTION}"}
    ]
    assert rows[1]["extra_info"] == {"split": "train", "index": 1}
    with pytest.raises(ValueError, match="no '#### <answer>'"):
        verl_data.gsm8k_answer("the answer is 7")
