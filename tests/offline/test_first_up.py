"""Every step before training is in the plan's times (issue #47): a dataset's preparation is in the
first `pulumi up`'s critical path and in the start of each job that waits for it, and each image a
job pulls counts at its own size (VERL's image is not the training image, nor already on the nodes)."""

from __future__ import annotations

import re

import pytest
from support.paths import ROOT
from support.plans import job_block
from test_examples import planned

from components.datasets import job_name
from config import parse_config
from domain.catalog import image_compressed_gb, image_pull_minutes, verl_image_compressed_gb
from domain.datasets import preparation_minutes
from offline.first_up import image_sizes, preparations, waits_for_data
from offline.plan import read_stack_file


@pytest.fixture(scope="module")
def llama_c4(tmp_path_factory):
    return planned("llama-c4", tmp_path_factory.mktemp("llama-c4"))


def test_the_first_up_waits_for_the_dataset_before_the_job_trains(llama_c4):
    text = llama_c4.stdout
    first_up = float(
        re.search(r"Estimated first `pulumi up`: ~(\d+) min until training starts", text).group(1)
    )
    steps = re.findall(r"^\s+([\d.]+) min  (\S+) \((\S+), ~([\d.]+) min\)$", text, re.M)
    names = [name for _, name, _, _ in steps]
    assert names[-2:] == ["dataset-c4-en-job", "job-llama-1b-c4"]
    dataset_minutes = float(re.search(r"c4-en .*~(\d+) min; read by", text).group(1))
    assert first_up > dataset_minutes + 12  # after the EKS control plane, the preparation, then the job


def test_the_jobs_start_says_it_waits_for_its_dataset(llama_c4):
    line, _ = job_block(llama_c4.stdout, "llama-1b-c4")
    found = re.search(
        r"trains ~([\d.]+) min after admission \(dataset preparation ~(\d+), first up only,", line
    )
    assert found and float(found.group(1)) > float(found.group(2)) > 30


def test_a_preparation_counts_its_image_pull_and_its_tokens():
    values, secrets = read_stack_file(ROOT / "examples" / "llama-c4.yaml")
    cfg = parse_config("llama-c4", values, frozenset(secrets))
    (d,) = cfg.datasets
    pull = image_pull_minutes(image_compressed_gb(cfg.image.base_image))
    assert preparations(cfg) == {job_name(d.spec): pull + preparation_minutes(d.spec)}
    assert waits_for_data(cfg) == {"llama-1b-c4": pull + preparation_minutes(d.spec)}


def test_a_verl_job_pulls_verls_image_at_its_own_size(tmp_path):
    run = planned("verl-grpo-existing", tmp_path)
    line, _ = job_block(run.stdout, "grpo-gsm8k")
    pull = float(re.search(r"image pull ~([\d.]+)", line).group(1))
    training = image_compressed_gb(
        parse_config("x", read_stack_file(ROOT / "Pulumi.dev.yaml")[0]).image.base_image
    )
    # The VERL image and, for its data step, the training image: neither is on the nodes yet.
    assert pull == pytest.approx(image_pull_minutes(verl_image_compressed_gb() + training), abs=0.05)


def test_a_kind_image_is_never_pulled():
    values, secrets = read_stack_file(ROOT / "Pulumi.local.yaml")
    cfg = parse_config("local", values, frozenset(secrets))
    assert image_sizes(None, cfg)("anything") == 0.0  # loaded into kind, never pulled
