"""Every stack file in examples/ plans as `make plan` would plan it (config, program, account checks,
scheduling), and each one does what docs/examples.md says it does; the bring-your-own script trains."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from support.paths import ROOT

from components.image import TRAINING_TARGET
from components.jobs.kinds import KINDS
from config.build import ImageConfig
from offline.plan import main
from offline.stack_file import read_stack_file

EXAMPLES = ROOT / "examples"
STACK_FILES = sorted(p.stem for p in EXAMPLES.glob("*.yaml"))


class Planned:
    def __init__(self, name: str, out: Path) -> None:
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            self.code = main(
                ["--stack", name, "--stack-file", str(EXAMPLES / f"{name}.yaml"), "--out", str(out)]
            )
        self.stdout, self.stderr = stdout.getvalue(), stderr.getvalue()
        self.dir = out / name

    def manifest(self, name: str) -> dict:
        return yaml.safe_load((self.dir / "manifests" / f"{name}.yaml").read_text())

    def resources(self) -> list[dict]:
        return json.loads((self.dir / "resources.json").read_text())


def planned(name: str, tmp_path: Path) -> Planned:
    run = Planned(name, tmp_path)
    assert run.code == 0, run.stderr
    assert "error" not in run.stderr
    return run


def test_every_goal_has_its_example():
    assert STACK_FILES == ["byo", "cpu-ddp-gloo", "kind", "llama-c4", "verl-grpo-existing"]


@pytest.mark.parametrize("name", STACK_FILES)
def test_every_example_plans_and_names_its_walkthrough(name, tmp_path):
    run = planned(name, tmp_path)
    assert f"Wrote {run.dir}/resources.json" in run.stdout
    # Each file's header points at its section of docs/examples.md (tests/test_docs.py checks the anchor).
    assert "docs/examples.md#" in (EXAMPLES / f"{name}.yaml").read_text()


def trainjob_pods(run, name: str) -> tuple[dict, int]:
    """A TrainJob's pod template and pod count, as Trainer builds them from the job and its
    group's runtime (the plan's two manifests) and Kueue counts them."""
    job = run.manifest(f"trainjob-training-{name}")
    runtime = run.manifest(f"clustertrainingruntime-{job['spec']['runtimeRef']['name']}")
    ((_, template, count),) = KINDS["TrainJob"].pod_sets(
        job, {("ClusterTrainingRuntime", runtime["metadata"]["name"]): runtime}
    )
    return template, count


def test_llama_on_c4_runs_on_four_single_gpu_nodes_with_the_token_from_a_secret(tmp_path):
    run = planned("llama-c4", tmp_path)
    # The `secure:` form, as `pulumi config set --secret hfToken` writes it, is read as a secret.
    assert read_stack_file(EXAMPLES / "llama-c4.yaml")[1] == ["trainstack:hfToken"]
    template, count = trainjob_pods(run, "llama-1b-c4")
    assert count == 4
    (container,) = template["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}},
    } in container["env"]
    data = container["args"][container["args"].index("--data") + 1]
    assert data.startswith("s3://") and "/datasets/c4-en/" in data and data.endswith("/train.bin")
    assert "c4-en" in run.stdout and "~4.0 GB" in run.stdout  # the dataset's line in the plan
    # The memory-fit rule's figure at the batch the file sets, with room to spare.
    assert "memory: the 1b model at batch 4 x 2048 tokens needs" in run.stdout
    # The token never reaches the plan's files.
    assert "ReplaceMe" not in (run.dir / "resources.json").read_text()


def test_verl_grpo_runs_on_the_existing_cluster_without_creating_one(tmp_path):
    run = planned("verl-grpo-existing", tmp_path)
    types = {r["type"] for r in run.resources()}
    assert "eks:index:Cluster" not in types and "aws:ec2/vpc:Vpc" not in types
    job = run.manifest("rayjob-training-grpo-gsm8k")
    assert "verl.trainer.main_ppo" in job["spec"]["entrypoint"]
    assert "algorithm.adv_estimator=grpo" in job["spec"]["entrypoint"]
    assert "ok    EKS cluster: needs ml-platform in us-east-1" in run.stdout


def test_cpu_ddp_runs_with_gloo_on_the_system_nodes(tmp_path):
    run = planned("cpu-ddp-gloo", tmp_path)
    template, count = trainjob_pods(run, "ddp-gloo")
    assert count == 2
    (container,) = template["spec"]["containers"]
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])
    # One process per pod: Trainer's `auto` would start one per CPU.
    assert run.manifest("trainjob-training-ddp-gloo")["spec"]["trainer"]["numProcPerNode"] == 1
    assert {"name": "PET_NPROC_PER_NODE", "value": "1"} in container["env"]
    assert (
        "ddp-gloo                       TrainJob   2 node(s) of system (queue system), 0 GPUs" in run.stdout
    )


def test_the_kind_example_is_the_local_stack(tmp_path):
    assert read_stack_file(EXAMPLES / "kind.yaml") == read_stack_file(ROOT / "Pulumi.local.yaml")
    run = planned("kind", tmp_path)
    assert "Account checks: none; a kubeconfig stack uses no AWS account." in run.stdout


def test_byo_builds_its_own_context_and_runs_its_command(tmp_path):
    run = planned("byo", tmp_path)
    template, _ = trainjob_pods(run, "byo-ddp")
    (container,) = template["spec"]["containers"]
    assert container["command"] == ["torchrun", "/opt/byo/train.py"]
    assert container["args"] == ["--steps", "500", "--checkpoint-dir", "/checkpoints"]
    # The image the job runs is built from examples/byo, not workload/, on the default pinned base.
    (context,) = [r for r in run.resources() if r["name"] == "image-context"]
    with zipfile.ZipFile(context["inputs"]["source"]["asset"]["path"]) as zf:
        assert sorted(zf.namelist()) == ["Dockerfile", "smoke_test.py", "train.py"]
    (project,) = [r for r in run.resources() if r["type"] == "aws:codebuild/project:Project"]
    env = {v["name"]: v["value"] for v in project["inputs"]["environment"]["environmentVariables"]}
    assert env["BASE_IMAGE"] == ImageConfig().base_image
    # The build runs `docker build --target training` (components/buildspec.yml): the stage must exist.
    dockerfile = (EXAMPLES / "byo" / "Dockerfile").read_text()
    assert re.search(rf"^FROM \S+ AS {TRAINING_TARGET}$", dockerfile, re.M)


def test_the_byo_script_really_trains_with_ddp_on_cpu(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RANK", "WORLD_SIZE", "MASTER_", "PET_"))}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            str(EXAMPLES / "byo" / "train.py"),
            "--steps",
            "40",
            "--checkpoint-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    losses = [float(line.split()[-1]) for line in proc.stdout.splitlines() if line.startswith("step ")]
    assert len(losses) == 3  # steps 0, 20, 39 from rank 0 only
    assert losses[-1] < losses[0] / 3
    assert (tmp_path / "model.pt").is_file()


def test_the_byo_smoke_test_runs_as_the_image_build_runs_it():
    proc = subprocess.run(
        [sys.executable, "smoke_test.py"],
        cwd=EXAMPLES / "byo",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith("smoke test: 3 steps, loss ")
