"""What a VERL job (GRPO or PPO) needs, derived from its node group: the stack's VERL image, the
dataset prepared on every node, and VERL's Hydra overrides.

- **Image.** VERL's application images carry its dependencies (vLLM, FSDP, flash-attention) but
  neither verl nor the EFA stack (without aws-ofi-nccl, NCCL falls back to TCP). The stack's image
  pipeline builds its own on top (workload/Dockerfile, target verl; components/image.py): the EFA
  stack checked against its pinned checksum and `verl==VERL_VERSION` from a hashed lock
  (workload/verl/requirements.lock), pushed to the stack's ECR and run by digest. Nothing is
  installed when a job starts.
- **Data.** An init container of the stack's own image (trainer.verl_data) writes the dataset's
  parquet files to /data on each pod, so VERL's driver finds them wherever Ray places it.
- **Sizes.** GPUs per node and nodes come from the group; vLLM's tensor parallelism from the config;
  PPO adds a critic of the same model. The EFA/NCCL env, the HF token and the checkpoint volume come
  with every job pod; checkpoints go to /checkpoints/<job> (on FSx they outlive the job).
"""

from __future__ import annotations

import json
import shlex

import pulumi

from config.jobs import VerlConfig

# workload/verl/requirements.lock pins this version (a test holds them equal).
VERL_VERSION = "0.9.1"
# VERL's application image (vLLM) by digest, its tags move: the base of the stack's VERL image
# (workload/Dockerfile's VERL_BASE_IMAGE default agrees; a test holds them equal).
VERL_IMAGE = (
    "verlai/verl:vllm024.dev2@sha256:b867883b0dd011363e69ab2ab344922a28c5bd0409e2a324e3ee70fb27ca7543"
)
DATA_DIR = "/data"


def runtime_env(verl: VerlConfig) -> str:
    """Ray's runtime env for the job (RayJob.runtimeEnvYAML): environment variables only; verl is
    in the image, so no node installs anything at start."""
    return json.dumps({"env_vars": {"TOKENIZERS_PARALLELISM": "true", "VLLM_LOGGING_LEVEL": "WARN"}})


def data_files(verl: VerlConfig) -> tuple[str, str]:
    return f"{DATA_DIR}/{verl.dataset}/train.parquet", f"{DATA_DIR}/{verl.dataset}/test.parquet"


def data_prep_command(verl: VerlConfig) -> list[str]:
    return [
        "python",
        "-m",
        "trainer.verl_data",
        "--dataset",
        verl.dataset,
        "--out",
        f"{DATA_DIR}/{verl.dataset}",
    ]


def overrides(
    verl: VerlConfig, job: str, nodes: int, gpus: int, checkpoint_dir: str, experiment: str | None
) -> list[str]:
    """VERL's Hydra overrides for main_ppo."""
    train, test = data_files(verl)
    mini_batch = max(1, verl.batch_size // 4)
    found = [
        f"algorithm.adv_estimator={'grpo' if verl.algorithm == 'grpo' else 'gae'}",
        f"data.train_files={train}",
        f"data.val_files={test}",
        f"data.train_batch_size={verl.batch_size}",
        "data.max_prompt_length=512",
        "data.max_response_length=1024",
        f"actor_rollout_ref.model.path={verl.model}",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini_batch}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        f"actor_rollout_ref.actor.use_kl_loss={verl.algorithm == 'grpo'}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={verl.tensor_parallel}",
        f"actor_rollout_ref.rollout.n={verl.rollouts if verl.algorithm == 'grpo' else 1}",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.5",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        f"trainer.n_gpus_per_node={gpus}",
        f"trainer.nnodes={nodes}",
        f"trainer.total_epochs={verl.epochs}",
        f"trainer.save_freq={verl.save_every}",
        f"trainer.test_freq={verl.save_every}",
        f"trainer.default_local_dir={checkpoint_dir}",
        "trainer.resume_mode=auto",  # a relaunch continues from the newest checkpoint there
        f"trainer.experiment_name={job}",
        "trainer.critic_warmup=0",
    ]
    if verl.algorithm == "ppo":
        found += [f"critic.model.path={verl.model}", "critic.ppo_micro_batch_size_per_gpu=4"]
    # VERL's MLflow logger reads MLFLOW_TRACKING_URI from the pod's env.
    loggers = "['console','mlflow']" if experiment else "['console']"
    found += [f"trainer.logger={loggers}", f"trainer.project_name={experiment or 'trainstack'}"]
    return found


def entrypoint(
    verl: VerlConfig, job: str, nodes: int, gpus: int, checkpoint_dir: str, experiment: str | None
) -> pulumi.Output[str]:
    parts = [
        "python3",
        "-m",
        "verl.trainer.main_ppo",
        *overrides(verl, job, nodes, gpus, checkpoint_dir, experiment),
    ]
    return pulumi.Output.from_input(shlex.join(parts))
