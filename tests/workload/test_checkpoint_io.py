"""Checkpoint I/O in one process: the run's staging buffer, and copies installed whole."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.staging import DefaultStager
from trainer import checkpoint


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    model(torch.randn(4, 16)).square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_background_saves_reuse_one_staging_buffer_and_write_each_steps_values(
    tmp_path, monkeypatch, control
):
    """dcp.async_save's own stager allocates the whole state afresh every save (and closes it);
    the store's stager copies each save into the storage it staged the first one in, and only the
    store closes it. The staged copies are kept alive here, so a fresh allocation cannot land at
    the same address by chance."""
    staged, closed = [], []
    stage, close = DefaultStager.stage, DefaultStager.close

    def spy_stage(self, state_dict, **kwargs):
        result = stage(self, state_dict, **kwargs)
        staged.append(result)
        return result

    def spy_close(self):
        closed.append(self)
        close(self)

    monkeypatch.setattr(DefaultStager, "stage", spy_stage)
    monkeypatch.setattr(DefaultStager, "close", spy_close)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters())
    store = checkpoint.CheckpointStore(tmp_path / "ckpt", control)
    weights = {}
    for at in (10, 20):
        step(model, optimizer)
        weights[at] = model[0].weight.detach().clone()
        store.save(at, model, optimizer, background=True).finish()

    first, second = (s["model"]["0.weight"] for s in staged)
    assert first.data_ptr() == second.data_ptr()
    adam_first, adam_second = (s["optim"]["state"]["0.weight"]["exp_avg"] for s in staged)
    assert adam_first.data_ptr() == adam_second.data_ptr()
    assert closed == []
    # Each file holds its own step's values: the buffer was refilled only after step 10 was written.
    for at in (10, 20):
        loaded = {"model": {"0.weight": torch.zeros(32, 16)}}
        dcp.load(loaded, checkpoint_id=str(checkpoint.step_dir(tmp_path / "ckpt", at)), process_group=control)
        assert torch.equal(loaded["model"]["0.weight"], weights[at])
    assert not torch.equal(weights[10], weights[20])
    assert checkpoint.complete_steps(tmp_path / "ckpt") == [10, 20]
    store.close()
    assert closed == [store.stager]


@pytest.mark.parametrize("cuda", [True, False])
def test_the_staging_buffer_is_pinned_exactly_when_cuda_is_there(monkeypatch, cuda):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    options = checkpoint.staging_options()
    assert options.use_pinned_memory is cuda
    assert options.use_non_blocking_copy is cuda  # DefaultStager refuses it without an accelerator
    assert options.use_async_staging is False  # the next optimizer step must not race the copy
    assert options.use_shared_memory is False  # the writer is a thread


def complete_dir(path, step: int, shards: int = 2):
    path.mkdir(parents=True)
    (path / checkpoint.METADATA).write_bytes(b"m")
    for rank in range(shards):
        (path / f"__{rank}_0.distcp").write_bytes(b"shard")
    (path / checkpoint.MARKER).write_text(f'{{"step": {step}}}')
    return path


def test_a_copy_from_elsewhere_is_installed_whole_or_not_at_all(tmp_path, monkeypatch):
    source = complete_dir(tmp_path / "restored", 30)
    root = tmp_path / "ckpt"
    root.mkdir()

    def copy_part_then_fail(src, dst, **kwargs):
        dst.mkdir()
        shutil.copy2(src / checkpoint.MARKER, dst / checkpoint.MARKER)  # the marker first, even
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(shutil, "copytree", copy_part_then_fail)
    with pytest.raises(OSError, match="No space left"):
        checkpoint.install_copy(root, source)
    assert list(root.iterdir()) == []  # neither a torn step nor its staging directory
    monkeypatch.undo()

    assert checkpoint.install_copy(root, source) == 30
    assert checkpoint.complete_steps(root) == [30]
    assert sorted(p.name for p in checkpoint.step_dir(root, 30).iterdir()) == sorted(
        p.name for p in source.iterdir()
    )
    (checkpoint.step_dir(root, 30) / "__0_0.distcp").write_bytes(b"already here")
    assert checkpoint.install_copy(root, source) == 30  # a complete step is left as it is
    assert (checkpoint.step_dir(root, 30) / "__0_0.distcp").read_bytes() == b"already here"


def test_a_step_saved_again_is_not_complete_until_its_new_files_are(tmp_path, control):
    """A resumed run saves a step again that the run before it had marked complete on this volume:
    while the new files are written, the step does not look complete."""
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.AdamW(model.parameters())
    store = checkpoint.CheckpointStore(tmp_path / "ckpt", control)
    store.save(10, model, optimizer).finish()
    assert checkpoint.complete_steps(tmp_path / "ckpt") == [10]
    step(model, optimizer)
    pending = store.save(10, model, optimizer, background=True)
    assert checkpoint.complete_steps(tmp_path / "ckpt") == []  # the earlier run's marker is gone
    pending.finish()
    assert checkpoint.complete_steps(tmp_path / "ckpt") == [10]
    store.close()
