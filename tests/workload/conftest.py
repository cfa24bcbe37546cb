"""What the workload's tests share: torch on one thread in the test process, a one-rank process
group, and one uninterrupted training run, read by tests that check different things of it
(support.training says which)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from support.training import UNINTERRUPTED_ARGS, Run, run_to_end


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Torch in the test process on one thread, as each rank runs under torchrun
    (OMP_NUM_THREADS=1). With one per core, every op waits for all of them, and on a CPU shared
    with the suite's other tests one is often not running: a 25-step run took 3x as long."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def uninterrupted_run(tmp_path_factory) -> Run:
    """Two torchrun ranks as a pod runs them, UNINTERRUPTED_ARGS. Validation reads other windows
    and changes no weight: the training losses are those of the same run without it."""
    directory = tmp_path_factory.mktemp("uninterrupted")
    return Run(directory, run_to_end(directory, *UNINTERRUPTED_ARGS))


@pytest.fixture
def control(tmp_path, monkeypatch):
    """A one-rank job: the default group and a control group, both gloo."""
    monkeypatch.setenv("LOCAL_RANK", "0")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        yield dist.new_group(backend="gloo")
    finally:
        dist.destroy_process_group()
