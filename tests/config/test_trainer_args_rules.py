"""The plan reads a default-trainer job's `args` with the trainer's own parser (config/trainer_args.py
loads workload/trainer/flags.py, which trainer.config builds its parser from): what the trainer would
refuse at start is refused before anything is registered, naming the flag, and the figures use the
values the job will run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.config_rules import BASE, group, job, problems
from trainer import config as trainer_config
from trainer import flags as image_flags

from config import parse_config, trainer_args
from offline.training_lines import training_model_lines


def test_the_plan_reads_the_file_the_trainer_imports():
    assert Path(image_flags.__file__).resolve() == trainer_args.FLAGS_FILE
    plan_flags = trainer_args.flags.flag_names(trainer_args.flags.train_parser(trainer_args.MAX_SEQ_LEN))
    assert plan_flags == image_flags.flag_names(trainer_config.parser())
    assert trainer_args.MAX_SEQ_LEN == trainer_config.MAX_SEQ_LEN


def test_a_misspelt_flag_is_refused_naming_the_nearest():
    (msg,) = problems(jobs=[job(model="tiny", args=["--batch-sise", "2"])])
    assert msg == (
        'trainstack:jobs[0].args = "--batch-sise": not an argument of the default trainer, which would '
        "refuse it at start (exit 2); allowed: --batch-size"
    )
    # The trainer itself: argparse's exit 2, which the operator's policy reads as permanent.
    with pytest.raises(SystemExit) as exit_:
        trainer_config.parse_args(["--batch-sise", "2"])
    assert exit_.value.code == 2


def test_a_sequence_over_the_models_is_refused_in_the_trainers_words():
    msgs = problems(
        gpuNodeGroups=[group(instanceType="p5.48xlarge")], jobs=[job(model="1b", args=["--seq-len", "4096"])]
    )
    assert msgs == [
        'trainstack:jobs[0].args = "--seq-len 4096": --seq-len 4096: the 1b model handles at most 2048 '
        "tokens; allowed: a value the trainer takes"
    ]


@pytest.mark.parametrize(
    ("kind", "args", "flag", "instead"),
    [
        ("PyTorchJob", ["--nproc-per-node", "16"], "--nproc-per-node", "nodes and nodeGroup"),
        ("TrainJob", ["--nproc_per_node=16"], "--nproc_per_node", "nodes and nodeGroup"),
        ("RayJob", ["--num-workers", "16"], "--num-workers", "nodes (one worker per GPU of each node)"),
        ("PyTorchJob", ["--mod", "1b"], "--model", "model"),  # argparse takes a unique prefix
        ("PyTorchJob", ["--steps=10"], "--steps", "steps"),
        ("PyTorchJob", ["--keep-checkpoints", "9"], "--keep-checkpoints", "storage.checkpointsKept"),
    ],
)
def test_a_flag_the_stack_sets_is_refused_naming_the_setting(kind, args, flag, instead):
    (msg,) = problems(jobs=[job(kind=kind, args=args)])
    assert msg.startswith(f'trainstack:jobs[0].args = "{args[0]}": ')
    assert flag in msg and msg.endswith(f"; allowed: {instead}")


def test_a_ray_flag_on_a_pytorchjob_is_not_the_trainers():
    (msg,) = problems(jobs=[job(args=["--use-gpu"])])
    assert msg.startswith('trainstack:jobs[0].args = "--use-gpu": not an argument of the default trainer')


@pytest.mark.parametrize(
    ("instance", "found"),
    [("g5.xlarge", "A10G (g5.xlarge)"), ("p4d.24xlarge", "A100 (p4d.24xlarge)")],
)
def test_float8_without_float8_tensor_cores_is_refused(instance, found):
    msgs = problems(gpuNodeGroups=[group(instanceType=instance)], jobs=[job(model="tiny", args=["--float8"])])
    assert msgs == [
        f'trainstack:jobs[0].args = "--float8": --float8 needs a GPU with float8 tensor cores (H100/H200, '
        f"L4/L40S), and this pod has {found}: drop --float8 or run the job on such a group; allowed: no "
        "--float8, or a group of H100, H200, B200, L4 or L40S GPUs (p5, p5e, p5en, p6, g6, g6e)"
    ]


def test_float8_on_the_system_nodes_is_refused():
    (msg,) = problems(jobs=[job(nodeGroup="system", args=["--float8"])])
    assert "this pod has no GPU (" in msg


@pytest.mark.parametrize("instance", ["g6.xlarge", "p5.48xlarge"])
def test_float8_on_l4_and_h100_is_accepted(instance):
    values = {
        "trainstack:gpuNodeGroups": json.dumps([group(instanceType=instance)]),
        "trainstack:jobs": json.dumps([job(model="tiny", args=["--float8"])]),
    }
    parse_config("dev", {**BASE, **values})


def test_the_figures_use_the_values_the_parser_gives():
    """`--seq-len=1024` and the abbreviation `--batch 4` are what the trainer runs: the memory line says so."""
    values = {
        "trainstack:gpuNodeGroups": json.dumps([group(instanceType="p5.48xlarge")]),
        "trainstack:jobs": json.dumps([job(model="1b", args=["--batch", "4", "--seq-len=1024"])]),
    }
    cfg = parse_config("dev", {**BASE, **values})
    (memory, *_) = training_model_lines(cfg, "train")
    assert memory.startswith("memory: the 1b model at batch 4 x 1024 tokens needs")


def test_a_typo_gets_no_memory_advice_built_on_the_default():
    """Before: `--batch-sise 2` sized the job at the default batch and told the user to add
    `--batch-size 2`. Now the flag is the only problem."""
    msgs = problems(
        gpuNodeGroups=[group(instanceType="g5.12xlarge")], jobs=[job(model="1b", args=["--batch-sise", "2"])]
    )
    assert len(msgs) == 1 and "allowed: --batch-size" in msgs[0]
