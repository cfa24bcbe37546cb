"""The EFA preflight check, run for real on CPU: torchrun with 2 gloo processes; and the order
that lets it read NCCL's network on GPUs (NCCL's log set up before the process group), with NCCL
faked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
from support.paths import WORKLOAD
from trainer import distributed
from trainer import preflight as preflight_module
from trainer.preflight import network_from_nccl_log, uses_efa


def preflight(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            *(sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"),
            *("-m", "trainer.preflight", "--size-mb", "4", "--iters", "3", *args),
        ],
        cwd=WORKLOAD,
        capture_output=True,
        text=True,
        timeout=300,
    )


def report(proc: subprocess.CompletedProcess) -> dict:
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("preflight {")]
    return json.loads(line.removeprefix("preflight "))


@pytest.mark.slow(seconds=5)
def test_preflight_fails_on_every_check_a_node_misses_and_reports_what_it_measured():
    """One real run (a torchrun start is most of a run's cost) in which every check fails: the
    test machine has no /dev/infiniband (0 EFA devices where 4 are expected), its collectives use
    gloo, and no CPU reaches the floor. A passing check's verdict (exit 0, `ok`) is the in-process
    test below, with NCCL faked."""
    proc = preflight("--efa-per-node", "4", "--min-bus-bandwidth", "100000")
    assert proc.returncode != 0, proc.stderr[-2000:]
    r = report(proc)
    assert (r["ok"], r["world_size"], r["network"]) == (False, 2, "gloo (TCP)")
    assert r["bus_bandwidth_gbps"] > 0
    missing, missing_too, network, bandwidth = r["problems"]
    # One per rank, gathered on rank 0, then the network the collectives really used.
    said = "0 EFA devices given to the pod (/dev/infiniband/uverbs*), 4 expected"
    assert said in missing and said in missing_too
    assert network.startswith("the collectives use gloo (TCP), not EFA")
    # The figure as reported, not a second rounding of it.
    assert bandwidth.startswith(f"all-reduce bus bandwidth {r['bus_bandwidth_gbps']} GB/s is below the floor")
    assert "placement group" in bandwidth


def test_nccl_log_says_which_network():
    efa = "ip-10-0-1-5:123:456 [0] NCCL INFO NET/OFI Using aws-ofi-nccl 1.16.0\n"
    efa += "ip-10-0-1-5:123:456 [0] NCCL INFO Using network Libfabric\n"
    tcp = "ip-10-0-1-5:123:456 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.1.5<0>\n"
    tcp += "ip-10-0-1-5:123:456 [0] NCCL INFO Using network Socket\n"
    assert network_from_nccl_log(efa) == "Libfabric" and uses_efa("Libfabric")
    assert uses_efa(network_from_nccl_log("x NCCL INFO Using network AWS Libfabric\n"))
    assert network_from_nccl_log(tcp) == "Socket" and not uses_efa("Socket")
    assert network_from_nccl_log("nothing here") is None and not uses_efa(None)


def test_efa_devices_are_counted_as_the_pod_was_given_them(tmp_path, monkeypatch):
    """In the shared RDMA namespace mode /sys/class/infiniband lists all 32 of a p5's devices in
    every pod; the pod's own are the uverbs character devices the EFA plugin put in /dev/infiniband."""
    pod = tmp_path / "dev-infiniband"
    pod.mkdir()
    for name in ("uverbs0", "uverbs1", "rdma_cm"):
        (pod / name).touch()
    monkeypatch.setattr(preflight_module, "RDMA_DEVICES", pod)
    (problem,) = preflight_module.local_problems(0, 32, preflight_module.torch.device("cpu"))
    assert "2 EFA devices given to the pod" in problem and "32 expected" in problem
    assert preflight_module.local_problems(0, 2, preflight_module.torch.device("cpu")) == []


# --- NCCL's log: set before the process group exists ------------------------------------------


class FakeNccl:
    """NCCL as the check meets it. It reads NCCL_DEBUG and NCCL_DEBUG_FILE once, at its first log
    line (ncclDebugInit, NCCL src/debug.cc), which comes as the communicator is created: at
    init_process_group, given device_id. Its network line goes to that file, or to stdout."""

    def __init__(self, network: str = "Libfabric"):
        self.network = network
        self.env_at_init: dict[str, str] = {}

    def init_process_group(self, backend: str, device_id=None, timeout=None, **how) -> None:
        self.env_at_init = dict(os.environ)
        if os.environ.get("NCCL_DEBUG") != "INFO":
            return
        line = f"ip-10-0-1-5:{os.getpid()}:7 [0] NCCL INFO Using network {self.network}\n"
        if "NCCL_DEBUG_FILE" in os.environ:
            Path(os.environ["NCCL_DEBUG_FILE"]).write_text(line)
        else:
            sys.stdout.write(line)


@pytest.fixture
def nccl(monkeypatch, tmp_path) -> FakeNccl:
    """A process on a GPU node about to join its process group, with NCCL faked and the
    environment torchrun gives it restored afterwards."""
    names = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "RANK", "WORLD_SIZE", "LOCAL_RANK")
    names += ("TORCH_NCCL_ASYNC_ERROR_HANDLING",)  # Ray Train sets it before its process group
    for name in (*names, "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)  # now restored (unset) after the test, whoever sets it
    # raising=False: so that, without the attribute, the test fails on what NCCL saw.
    monkeypatch.setattr(preflight_module, "NCCL_LOG_DIR", tmp_path / "nccl", raising=False)
    fake = FakeNccl()
    monkeypatch.setattr(distributed, "training_device", lambda local_rank: torch.device("cuda", local_rank))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", fake.init_process_group)
    return fake


class Joined(Exception):
    """The process group exists: what NCCL saw is recorded, nothing more is needed."""


@pytest.mark.parametrize("entrypoint", ["trainer.preflight", "trainer.train"])
def test_nccl_is_told_where_to_log_before_the_process_group_exists(nccl, monkeypatch, entrypoint):
    """Both entrypoints that run the check: the standalone preflight, and the trainer checking its
    own nodes before step 0 (an EFA group's PyTorchJob)."""
    from trainer import train

    def joined(*args, **kwargs):
        raise Joined

    monkeypatch.setattr(distributed, "control_group", joined)
    with pytest.raises(Joined):
        if entrypoint == "trainer.preflight":
            preflight_module.main(["--efa-per-node", "32"])
        else:
            train.main(["--preflight-efa-per-node", "32"])
    seen = nccl.env_at_init
    assert (seen.get("NCCL_DEBUG"), seen.get("NCCL_DEBUG_SUBSYS")) == ("INFO", "INIT,NET")
    assert seen.get("NCCL_DEBUG_FILE") == str(preflight_module.nccl_log_file())
    assert Path(seen["NCCL_DEBUG_FILE"]).parent.is_dir()  # NCCL opens the file, it makes no directory


def test_on_the_ray_path_nccl_is_told_where_to_log_before_the_process_group_exists(nccl, monkeypatch):
    """Ray Train creates a worker's process group before the training function runs, so the log is
    set up by the job's worker process setup hook: what `trainer.ray_train` gives `ray.init`, as
    Ray turns it into the job's environment, run as Ray's worker process runs it at its start, then
    Ray Train's own process group set-up for that worker, with NCCL faked."""
    import ray
    from ray._private import ray_constants
    from ray._private.runtime_env.setup_hook import (
        load_and_execute_setup_hook,
        upload_worker_process_setup_hook_if_needed,
    )
    from ray.train.torch.config import _setup_torch_process_group
    from trainer import ray_train

    inits = []
    monkeypatch.setattr(ray, "init", lambda **kwargs: inits.append(kwargs))
    monkeypatch.setattr(
        ray_train.TorchTrainer, "fit", lambda self: SimpleNamespace(error=None, checkpoint=None)
    )
    assert ray_train.main(["--num-workers", "2", "--use-gpu", "--preflight-efa-per-node", "32"]) == 0
    env_vars = upload_worker_process_setup_hook_if_needed(dict(inits[0]["runtime_env"]), worker=None)[
        "env_vars"
    ]
    assert "NCCL_DEBUG_FILE" not in os.environ  # the driver's own environment is left alone
    assert load_and_execute_setup_hook(env_vars[ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR]) is None
    _setup_torch_process_group("nccl", world_rank=0, world_size=2, init_method="env://", timeout_s=300)
    seen = nccl.env_at_init
    assert (seen.get("NCCL_DEBUG"), seen.get("NCCL_DEBUG_SUBSYS")) == ("INFO", "INIT,NET")
    assert seen.get("NCCL_DEBUG_FILE") == str(preflight_module.nccl_log_file())
    assert Path(seen["NCCL_DEBUG_FILE"]).parent.is_dir()
    # A job that checks no nodes leaves NCCL's log as the job's env sets it.
    assert ray_train.main(["--num-workers", "2"]) == 0 and inits[1]["runtime_env"] == {}


def test_the_check_finds_the_network_nccl_logged_at_init(nccl, monkeypatch, tmp_path, capsys):
    """The standalone preflight on two EFA nodes, NCCL faked: the network line NCCL wrote when the
    communicator was created is the one the check reads, and it is echoed to stderr for
    `trainstack doctor` (with a log file set, NCCL writes nothing to the output)."""
    pod = tmp_path / "dev-infiniband"
    pod.mkdir()
    for name in ("uverbs0", "uverbs1"):
        (pod / name).touch()
    monkeypatch.setattr(preflight_module, "RDMA_DEVICES", pod)
    in_process_check(monkeypatch, tmp_path, [250.0])

    assert preflight_module.main(["--efa-per-node", "2", "--min-bus-bandwidth", "200"]) == 0
    out, err = capsys.readouterr()
    r = report(subprocess.CompletedProcess([], 0, out, err))
    assert (r["ok"], r["network"], r["problems"]) == (True, "Libfabric", [])
    assert "NCCL INFO Using network Libfabric" in err


def in_process_check(monkeypatch, tmp_path, measured: list[float]):
    """The standalone preflight's main on two ranks, its collectives faked (with the `nccl`
    fixture: no process group is made), each bandwidth measurement the next of `measured`."""
    figures = iter(measured)
    monkeypatch.setattr(preflight_module, "TERMINATION_LOG", tmp_path / "termination-log")
    monkeypatch.setattr(preflight_module, "bus_bandwidth", lambda device, size_mb, iters: next(figures))
    monkeypatch.setattr(distributed, "control_group", lambda timeout: "control")
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    monkeypatch.setattr(
        dist, "all_gather_object", lambda out, obj, group=None: out.__setitem__(slice(None), [obj] * len(out))
    )
    monkeypatch.setattr(dist, "destroy_process_group", lambda: None)


def test_one_slow_sample_does_not_fail_the_job_for_good(nccl, monkeypatch, tmp_path, capsys):
    """A first measurement on a busy moment of the fabric, then one over the floor: the job's nodes
    pass (a failure here is permanent, exit 3)."""
    in_process_check(monkeypatch, tmp_path, [150.0, 250.0])
    assert preflight_module.main(["--min-bus-bandwidth", "200"]) == 0
    out, err = capsys.readouterr()
    r = report(subprocess.CompletedProcess([], 0, out, err))
    assert (r["ok"], r["bus_bandwidth_gbps"], r["bandwidth_samples_gbps"]) == (True, 250.0, [150.0, 250.0])


def test_the_floor_fails_on_the_best_of_its_samples(nccl, monkeypatch, tmp_path, capsys):
    in_process_check(monkeypatch, tmp_path, [150.0, 180.0, 170.0, 999.0])
    assert preflight_module.main(["--min-bus-bandwidth", "200"]) != 0
    out, err = capsys.readouterr()
    r = report(subprocess.CompletedProcess([], 1, out, err))
    assert r["bandwidth_samples_gbps"] == [150.0, 180.0, 170.0]  # three, never the fourth
    (problem,) = r["problems"]
    assert problem.startswith(
        "all-reduce bus bandwidth 180.0 GB/s is below the floor of 200 GB/s (the best of 3"
    )
