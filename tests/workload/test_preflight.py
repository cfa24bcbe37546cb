"""The EFA preflight check, run for real on CPU: torchrun with 2 gloo processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.paths import WORKLOAD
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
def test_preflight_passes_and_reports_bus_bandwidth():
    proc = preflight("--min-bus-bandwidth", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    r = report(proc)
    assert r["ok"] is True and r["world_size"] == 2 and r["problems"] == []
    assert r["bus_bandwidth_gbps"] > 0
    assert r["network"] == "gloo (TCP)"


@pytest.mark.slow(seconds=5)
def test_preflight_fails_below_the_floor_with_the_measured_figure():
    proc = preflight("--min-bus-bandwidth", "100000")
    assert proc.returncode != 0
    r = report(proc)
    assert r["ok"] is False
    (problem,) = r["problems"]
    # The figure as reported, not a second rounding of it.
    assert problem.startswith(f"all-reduce bus bandwidth {r['bus_bandwidth_gbps']} GB/s is below the floor")
    assert "placement group" in problem


@pytest.mark.slow(seconds=5)
def test_preflight_fails_when_efa_devices_are_missing():
    # The test machine has no /dev/infiniband: 0 EFA devices where 4 are expected.
    proc = preflight("--efa-per-node", "4")
    assert proc.returncode != 0
    problems = report(proc)["problems"]
    # One per rank, gathered on rank 0, then the network the collectives really used.
    said = "0 EFA devices given to the pod (/dev/infiniband/uverbs*), 4 expected"
    assert [said in p for p in problems] == [True, True, False]
    assert problems[2].startswith("the collectives use gloo (TCP), not EFA")


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
