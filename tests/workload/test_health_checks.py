"""The health gate's readers (workload/trainer/health_checks.py) on its programs' outputs, pass, warn
and fail of each (tests/workload/recorded/health/: written to each program's published format, a
GPU node's, since none is lent here), and the burn-in's order: it stops at the first fatal step, and
its verdict reaches the termination log the gate reads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from trainer import burn_in
from trainer import health_checks as hc

RECORDED = Path(__file__).parent / "recorded" / "health"


def read(name: str) -> str:
    return (RECORDED / name).read_text()


@pytest.mark.parametrize(
    ("name", "verdict", "severity", "words"),
    [
        ("nvidia-smi-q-x.pass.xml", "pass", "MONITOR", "8 GPUs"),
        ("nvidia-smi-q-x.warn-slowdown.xml", "warn", "MONITOR", "00000000:68:00.0: hw_slowdown"),
        ("nvidia-smi-q-x.fail-remap.xml", "fail", "ISOLATE", "00000000:48:00.0: row remapping failed"),
        ("nvidia-smi-q-x.fail-missing.xml", "fail", "REBOOT", "7 GPUs seen by the driver, 8 expected"),
    ],
)
def test_gpu_inventory(name, verdict, severity, words):
    check = hc.gpu_inventory(read(name), expected=8)
    assert (check.verdict, check.severity) == (verdict, severity)
    assert words in check.detail


@pytest.mark.parametrize(
    ("name", "verdict", "severity", "codes"),
    [
        ("kmsg.pass.txt", "pass", "MONITOR", None),
        # 13 and 43 are the application's (RESTART_APP): named, not held against the node.
        ("kmsg.warn-app.txt", "warn", "MONITOR", [13, 43]),
        # 63 (RESET) and 79 (REBOOT): the worst decides.
        ("kmsg.fail-bus.txt", "fail", "REBOOT", [63, 79]),
    ],
)
def test_xid_scan(name, verdict, severity, codes):
    check = hc.xid_scan(read(name))
    assert (check.verdict, check.severity) == (verdict, severity)
    assert check.figures.get("codes") == codes


def test_an_xid_line_gives_its_bus_code_and_words():
    assert hc.xids(read("kmsg.fail-bus.txt"))[1] == ("0000:b8:00", 79, "pid=0, GPU has fallen off the bus.")


def test_an_xid_the_table_lacks_is_watched_not_acted_on():
    check = hc.xid_scan("NVRM: Xid (PCI:0000:38:00): 999, pid=1, something new")
    assert check.verdict == "warn"


@pytest.mark.parametrize(("name", "verdict"), [("fi_info.pass.txt", "pass"), ("fi_info.fail.txt", "fail")])
def test_efa_devices_against_the_instances_count(name, verdict):
    expected = node_health_efa("p4d.24xlarge")
    check = hc.efa_devices(read(name), expected)
    assert check.verdict == verdict
    assert check.figures["devices"] == (4 if verdict == "pass" else 3)


def node_health_efa(instance_type: str) -> int:
    from domain.catalog import catalog_instance

    return catalog_instance(instance_type).max_efa_interfaces


@pytest.mark.parametrize(
    ("instance_type", "devices"),
    [
        ("p4d.24xlarge", 4),
        ("p4de.24xlarge", 4),
        ("p5.48xlarge", 32),
        ("p5e.48xlarge", 32),
        ("p5en.48xlarge", 16),
    ],
)
def test_the_efa_counts_the_burn_in_expects_are_the_instances(instance_type, devices):
    """The issue's counts per type, as the catalog (and EC2) gives them to the gate."""
    assert node_health_efa(instance_type) == devices


def test_p6_b200_expects_eight_efa_devices():
    assert node_health_efa("p6-b200.48xlarge") == 8


def test_nvlink_between_every_pair():
    assert hc.nvlink_topology(read("topo-m.pass.txt"), 8).verdict == "pass"
    broken = hc.nvlink_topology(read("topo-m.fail.txt"), 8)
    assert (broken.verdict, broken.severity) == ("fail", "RESET")
    assert broken.detail == "GPU pairs without NVLink: GPU2-GPU6 SYS"
    assert hc.nvlink_topology(read("topo-m.pass.txt"), 4).verdict == "fail"  # 8 where 4 are due


@pytest.mark.parametrize(
    ("name", "verdict", "severity", "words"),
    [
        ("dcgmi-diag-r2.pass.json", "pass", "MONITOR", "level 2: 16 hardware results passed"),
        # The node's setting, not its hardware: others drain whole fleets over it.
        ("dcgmi-diag-r2.warn-persistence.json", "warn", "MONITOR", "Persistence mode for GPU 0"),
        ("dcgmi-diag-r2.fail-memory.json", "fail", "ISOLATE", "memory GPU 3: GPU 3 had uncorrectable"),
        # DCGM declined to test this SKU: not a silent pass.
        ("dcgmi-diag-r2.warn-skipped.json", "warn", "MONITOR", "ran no hardware test"),
    ],
)
def test_dcgm_diagnostics(name, verdict, severity, words):
    check = hc.dcgm_diagnostics(read(name), level=2)
    assert (check.verdict, check.severity) == (verdict, severity)
    assert words in check.detail


@pytest.mark.parametrize(
    ("name", "floor", "verdict", "severity", "words"),
    [
        (
            "all_reduce_perf.pass.txt",
            354.4,
            "pass",
            "MONITOR",
            "478.05 GB/s bus bandwidth at 2147483648 bytes",
        ),
        # No floor yet (a type without a published figure, before its group calibrates): recorded.
        ("all_reduce_perf.pass.txt", None, "pass", "MONITOR", "478.05 GB/s"),
        ("all_reduce_perf.fail-slow.txt", 354.4, "fail", "RESET", "201.52 GB/s at 2147483648 bytes is below"),
        # Wrong results are corruption, however fast.
        ("all_reduce_perf.fail-wrong.txt", 354.4, "fail", "ISOLATE", "6 wrong element(s)"),
        ("all_reduce_perf.fail-cuda.txt", 354.4, "fail", "RESET", "Test NCCL failure common.cu:1012"),
    ],
)
def test_all_reduce(name, floor, verdict, severity, words):
    check = hc.all_reduce(read(name), floor)
    assert (check.verdict, check.severity) == (verdict, severity)
    assert words in check.detail, check.detail


def test_the_all_reduce_figure_is_the_better_of_out_of_place_and_in_place():
    assert hc.all_reduce(read("all_reduce_perf.pass.txt"), None).figures == {
        "busGbps": 478.05,
        "bytes": 2147483648,
    }


def test_the_nccl_step_runs_nccl_tests_on_every_gpu_with_torchs_nccl(monkeypatch, tmp_path):
    seen = {}

    def run(command, **kwargs):
        seen["command"], seen["path"] = command, kwargs["env"]["LD_LIBRARY_PATH"]
        return subprocess.CompletedProcess(command, 0, read("all_reduce_perf.pass.txt"), "")

    monkeypatch.setattr(burn_in.subprocess, "run", run)
    monkeypatch.setattr(burn_in, "TERMINATION_LOG", tmp_path / "termination-log")
    assert burn_in.main(["nccl", "--gpus", "8", "--floor", "354.4"]) == 0
    assert seen["command"] == [
        "/opt/nccl-tests/all_reduce_perf", "-b", "2G", "-e", "2G", "-g", "8", "-w", "5", "-n", "20"
    ]  # fmt: skip
    # The libraries nccl-tests was built against, where torch's wheels keep them: here as in the image.
    import nvidia.nccl

    assert str(Path(next(iter(nvidia.nccl.__path__))) / "lib") in seen["path"].split(":")
    assert (Path(seen["path"].split(":")[0]) / "libnccl.so.2").is_file()
    (check,) = json.loads((tmp_path / "termination-log").read_text())
    assert check["figures"]["busGbps"] == 478.05


def test_a_deployment_failure_without_a_word_is_a_failure():
    document = json.loads(read("dcgmi-diag-r2.warn-persistence.json"))
    for result in document["DCGM Diagnostic"]["test_categories"][0]["tests"][0]["results"]:
        result.pop("warnings")
    assert hc.dcgm_diagnostics(json.dumps(document), 2).verdict == "fail"


def test_no_dcgm_document_fails_with_what_it_said():
    check = hc.dcgm_diagnostics("Error: unable to establish a connection to the specified host: 10.0.1.7", 2)
    assert check.failed and "unable to establish a connection" in check.detail


def test_the_burn_in_stops_at_the_first_fatal_step(monkeypatch, tmp_path):
    calls = []

    def run(command):
        calls.append(command[0])
        return {"nvidia-smi": read("nvidia-smi-q-x.fail-missing.xml"), "fi_info": read("fi_info.pass.txt")}[
            command[0]
        ]

    monkeypatch.setattr(burn_in, "run", run)
    monkeypatch.setattr(burn_in, "kernel_log", lambda: read("kmsg.pass.txt"))
    checks = burn_in.node_checks(gpus=8, efa=4, nvlink=True)
    assert [c.name for c in checks] == ["gpu-inventory"]  # no Xid scan, EFA or NVLink after it
    assert calls == ["nvidia-smi"]
    log = tmp_path / "termination-log"
    assert burn_in.report(checks, log) == 1
    assert json.loads(log.read_text())[0]["severity"] == "REBOOT"


def test_a_healthy_node_runs_every_step_and_exits_zero(monkeypatch, tmp_path):
    outputs = {
        ("nvidia-smi", "-q"): read("nvidia-smi-q-x.pass.xml"),
        ("nvidia-smi", "topo"): read("topo-m.pass.txt"),
        ("fi_info", "-p"): read("fi_info.pass.txt"),
    }
    monkeypatch.setattr(burn_in, "run", lambda command: outputs[tuple(command[:2])])
    monkeypatch.setattr(burn_in, "kernel_log", lambda: read("kmsg.warn-app.txt"))
    checks = burn_in.node_checks(gpus=8, efa=4, nvlink=True)
    assert [(c.name, c.verdict) for c in checks] == [
        ("gpu-inventory", "pass"),
        ("xid", "warn"),
        ("efa", "pass"),
        ("nvlink", "pass"),
    ]
    assert burn_in.report(checks, tmp_path / "termination-log") == 0


def test_the_kernel_log_is_read_record_by_record_without_waiting(tmp_path):
    """/dev/kmsg gives one record per read, `<prio>,<seq>,<usec>,<flags>;<text>`; a plain file
    stands in (its end is the empty read where the device would say EAGAIN)."""
    records = tmp_path / "kmsg"
    records.write_text("6,1201,93872,-;NVRM: Xid (PCI:0000:b8:00): 79, pid=0, GPU has fallen off the bus.\n")
    assert "79, pid=0" in burn_in.kernel_log(records)


def test_a_dcgm_verdict_from_the_file_the_dcgm_step_left(tmp_path, monkeypatch):
    monkeypatch.setattr(burn_in, "TERMINATION_LOG", tmp_path / "termination-log")
    left = tmp_path / "dcgm.json"
    left.write_text(read("dcgmi-diag-r2.fail-memory.json"))
    assert burn_in.main(["dcgm-verdict", "--level", "2", "--file", str(left)]) == 1
    assert burn_in.main(["dcgm-verdict", "--level", "2", "--file", str(tmp_path / "none.json")]) == 1
