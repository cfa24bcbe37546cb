"""The smaller items of issue #47: each mistake reported once, no line that says nothing, template
values and gated models named before a live run finds them."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import yaml
from support.config_rules import group, job, problems
from support.paths import ROOT

from offline.placeholders import placeholder_secrets
from offline.plan import main


def plan_stdout(tmp_path: Path, config: dict) -> tuple[int, str, str]:
    path = tmp_path / "Pulumi.wording.yaml"
    path.write_text(yaml.safe_dump({"config": {"aws:region": "us-east-1", **config}}))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--stack-file", str(path), "--out", str(tmp_path / "plan")])
    return code, out.getvalue(), err.getvalue()


def test_a_misspelt_top_level_key_is_one_problem_not_a_knock_on_about_groups(tmp_path):
    code, _, err = plan_stdout(
        tmp_path,
        {
            "trainstack:gpuNodeGroup": [group()],
            "trainstack:jobs": [job()],
        },
    )
    assert code == 2
    (line,) = [x for x in err.splitlines() if x.startswith("  - ")]
    assert line.startswith('  - trainstack:gpuNodeGroup = "[{')
    assert "did you mean trainstack:gpuNodeGroups?" in line


def test_an_ml_type_on_a_created_cluster_is_one_problem():
    (msg,) = problems(gpuNodeGroups=[group(instanceType="ml.g5.8xlarge")], jobs=[job(model="tiny")])
    assert msg.startswith('trainstack:gpuNodeGroups[0].instanceType = "ml.g5.8xlarge": a SageMaker HyperPod')


def test_a_cpu_only_stack_says_its_jobs_run_on_cpu(tmp_path):
    code, out, _ = plan_stdout(
        tmp_path, {"trainstack:gpuNodeGroups": [], "trainstack:jobs": [job(nodeGroup="system")]}
    )
    assert code == 0
    assert "Jobs (on CPU nodes, no GPUs):" in out and "0 GPUs at" not in out


def test_a_placeholder_secret_is_a_template_value(tmp_path):
    (found,) = placeholder_secrets(ROOT / "Pulumi.hyperpod.yaml")
    assert str(found) == (
        'trainstack:hfToken = "(placeholder)": a stand-in, not ciphertext of this stack\'s secrets provider: '
        "`pulumi up` cannot decrypt it; allowed: pulumi config set --secret hfToken <value>"
    )
    real = tmp_path / "Pulumi.real.yaml"
    real.write_text("config:\n  trainstack:hfToken:\n    secure: v1:AAAAbbbb+/==:Q2lwaGVydGV4dA==\n")
    assert placeholder_secrets(real) == []


def test_a_verl_job_on_a_gated_model_without_a_token_is_named(tmp_path):
    llama = job(kind="RayJob", verl={"model": "meta-llama/Llama-3.2-1B-Instruct"})
    code, out, _ = plan_stdout(
        tmp_path,
        {"trainstack:gpuNodeGroups": [group(instanceType="g6e.xlarge")], "trainstack:jobs": [llama]},
    )
    assert code == 0
    assert (
        "WARNING: trainstack:jobs[0].verl.model: job 'train' starts from meta-llama/Llama-3.2-1B-Instruct, a "
        "gated model on the Hugging Face Hub, and the stack has no trainstack:hfToken"
    ) in out
