"""The per-interval agreement: the ranks agree (and the host reads a value back from the device)
only at log steps, k = --log-every steps apart, never every step; a rank that wants to stop is still
heard within k steps, and every rank stops and saves at the same step. The trainer's real loop on
one gloo rank."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
from trainer import checkpoint, train
from trainer.config import parse_args
from trainer.distributed import DistContext
from trainer.metrics import Window
from trainer.resilience import Agreement, Drained


@pytest.fixture
def one_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield DistContext(0, 1, 0, torch.device("cpu"), dist.new_group(backend="gloo"))
    finally:
        dist.destroy_process_group()


def config(tmp_path, *args: str):
    return parse_args(
        ["--log-every", "5", "--no-compile", "--checkpoint-dir", str(tmp_path / "ckpt"),
         "--data-cache", str(tmp_path / "data"), *args]
    )  # fmt: skip


@pytest.fixture
def steps_trained(monkeypatch) -> list[int]:
    """How many steps the loop has trained, as each step ends."""
    trained = [0]
    real = train.train_step

    def counted(*args):
        loss = real(*args)
        trained[0] += 1
        return loss

    monkeypatch.setattr(train, "train_step", counted)
    return trained


def test_the_host_reads_back_only_at_log_steps(tmp_path, monkeypatch, one_rank, steps_trained):
    """The agreement's flags and the window's loss are the only values the loop reads back from
    the device (each read waits for the GPU's stream); both come at steps 5, 10 and the last, 12."""
    agreed, recorded = [], []
    decide, metrics = Agreement.decide, Window.metrics

    def spy_decide(self, *args, **kwargs):
        agreed.append(steps_trained[0])
        return decide(self, *args, **kwargs)

    def spy_metrics(self, *args, **kwargs):
        recorded.append(steps_trained[0])
        return metrics(self, *args, **kwargs)

    monkeypatch.setattr(Agreement, "decide", spy_decide)
    monkeypatch.setattr(Window, "metrics", spy_metrics)
    train.train(config(tmp_path, "--steps", "12", "--checkpoint-every", "4"), one_rank)
    assert agreed == recorded == [5, 10, 12]
    # Saves at the steps every rank knows, agreed or not: 4 and 8 between agreements, 12 the last.
    assert checkpoint.complete_steps(tmp_path / "ckpt") == [4, 8, 12]


def test_a_rank_that_wants_to_stop_is_heard_within_k_steps(
    tmp_path, monkeypatch, capsys, one_rank, steps_trained
):
    """SIGTERM arrives after step 7 with k = 5: the ranks agree at step 10, save it and stop there
    (Drained, retryable); no rank trains past the agreed step."""

    class SigtermAfterStep7:
        @property
        def requested(self) -> bool:
            return steps_trained[0] >= 7

    monkeypatch.setattr(train, "StopRequested", SigtermAfterStep7)
    with pytest.raises(Drained):
        train.train(config(tmp_path, "--steps", "40", "--checkpoint-every", "0"), one_rank)
    events = [
        json.loads(x.removeprefix("metrics "))
        for x in capsys.readouterr().out.splitlines()
        if x.startswith("metrics ")
    ]
    (stopped,) = [e for e in events if e.get("event") == "stopped"]
    assert stopped["step"] == 10 == steps_trained[0]  # 7 < 10 <= 7 + k
    assert checkpoint.complete_steps(tmp_path / "ckpt") == [10]
    # The record of the stop's window counts the stop's save.
    (last,) = [e for e in events if e.get("step") == 10 and "loss" in e]
    assert last["checkpoint_stall_s"] > 0


@pytest.mark.parametrize("every", [4, 0])
def test_python_collects_at_the_same_steps_on_every_rank_not_when_it_likes(
    tmp_path, monkeypatch, one_rank, steps_trained, every
):
    """`--gc-every k`: Python's collector is off while the loop runs, and the loop collects the
    young generations after the start and after every k-th step, steps every rank reaches (a
    rank's own full collection stalls it at a step of its choosing, and the others wait for it at
    the next collective); the collector is back on afterwards. 0 leaves Python's collector be."""
    import gc

    collected, enabled_while_training = [], []
    real_step = train.train_step
    monkeypatch.setattr(gc, "collect", lambda generation=2: collected.append((generation, steps_trained[0])))

    def step(*args):
        enabled_while_training.append(gc.isenabled())
        return real_step(*args)

    monkeypatch.setattr(train, "train_step", step)
    train.train(config(tmp_path, "--steps", "12", "--gc-every", str(every)), one_rank)
    assert gc.isenabled()
    if every:
        assert collected == [(1, 0), (1, 4), (1, 8), (1, 12)] and not any(enabled_while_training)
    else:
        assert collected == [] and all(enabled_while_training)


def test_gc_every_is_a_number_of_steps():
    with pytest.raises(SystemExit):
        parse_args(["--gc-every", "-1"])
    assert parse_args([]).gc_every == 50  # torchtitan's gc_freq


@pytest.mark.parametrize("module", ["train", "launch", "preflight", "ray_train"])
def test_each_trainer_process_sets_aside_what_its_imports_made_before_main(module):
    """Each entry point of a pod's processes freezes its import-time objects first thing
    (trainer.process): none of its later collections walks them, the one at exit included."""
    import ast
    from pathlib import Path

    import trainer

    tree = ast.parse((Path(trainer.__file__).parent / f"{module}.py").read_text())
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"
    ]
    assert ast.unparse(block.body[0]) == "process.set_aside_startup_objects()"
    assert "main()" in ast.unparse(block.body[1])
    if module == "ray_train":  # a Ray Train worker process runs the training function, not main
        (function,) = [n for n in tree.body if getattr(n, "name", "") == "train_loop_per_worker"]
        assert ast.unparse(function.body[0]) == "process.set_aside_startup_objects()"
