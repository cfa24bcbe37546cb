"""The training image (workload/Dockerfile) and the smoke test its build runs before pushing: one
torch for the image and the tests, the EFA environment left to the stack, and NCCL's network
plugin checked as NCCL would load it. No Docker here: the files are read, the smoke test's checks
run on fakes."""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch
from support.paths import ROOT, WORKLOAD

from config.build import ImageConfig

DOCKERFILE = (WORKLOAD / "Dockerfile").read_text()


def load_smoke_test():
    spec = importlib.util.spec_from_file_location("smoke_test", WORKLOAD / "smoke_test.py")
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    return smoke


smoke = load_smoke_test()


def env_instructions(dockerfile: str) -> dict[str, str]:
    """NAME=value pairs of every ENV instruction, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", dockerfile)
    pairs = {}
    for line in joined.splitlines():
        if line.strip().startswith("ENV "):
            pairs.update(re.findall(r"(\w+)=(\S+)", line))
    return pairs


def test_the_image_bakes_no_efa_provider_settings():
    """FI_* belongs to EFA groups only (components/jobs/pods.py EFA_ENV): baked into the image, a
    group without EFA would ask libfabric for the efa provider too."""
    env = env_instructions(DOCKERFILE)
    assert "LD_LIBRARY_PATH" in env and "PYTHONUNBUFFERED" in env  # the parser sees the ENV lines
    assert [name for name in env if name.startswith("FI_")] == []


def test_the_image_and_the_tests_run_one_torch():
    """The image installs torch as workload/requirements.txt pins it (through its lock) on a base
    without a torch of its own, the tests install the same file, and this process runs that torch."""
    pinned = smoke.pinned_version("torch", WORKLOAD / "requirements.txt")
    assert pinned == "2.13.0"
    assert torch.__version__.split("+")[0] == pinned
    test_requirements = (ROOT / "requirements-test.txt").read_text().splitlines()
    assert "-r workload/requirements.txt" in test_requirements
    assert not [line for line in test_requirements if line.startswith("torch")]
    base = ImageConfig().base_image
    assert f"ARG BASE_IMAGE={base}" in DOCKERFILE
    assert base.startswith("nvidia/cuda:13.0") and "-base-" in base  # CUDA 13.0, as PyPI's torch 2.13.0
    # Installed from the hashed lock of requirements.txt (tests/workload/test_image_pins.py).
    assert "-r requirements.lock" in DOCKERFILE and "COPY requirements.txt requirements.lock ./" in DOCKERFILE
    assert "python3-dev" in DOCKERFILE  # Triton compiles its launcher against Python.h


def test_torchao_is_the_release_for_the_pinned_torch():
    """torchao 0.18.0 is the release its CI pinned torch 2.13.0 for; 0.14.1 was torch 2.9's."""
    from importlib.metadata import version

    pinned = smoke.pinned_version("torchao", WORKLOAD / "requirements.txt")
    assert pinned == "0.18.0"
    assert version("torchao") == pinned


def test_pinned_version_reads_a_pin_past_comments_and_other_packages(tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# torch==1.0 in a comment\ntorchao==0.18.0\ntorch==2.13.0  # the one\n")
    assert smoke.pinned_version("torch", requirements) == "2.13.0"
    requirements.write_text("ray==2.60.0\n")
    assert smoke.pinned_version("torch", requirements) is None


@pytest.mark.parametrize(
    ("installed", "pinned", "problems"),
    [
        ("2.13.0+cu130", "2.13.0", []),  # PyPI's CUDA build carries a local tag
        ("2.13.0", "2.13.0", []),
        (
            "2.9.1+cu128",
            "2.13.0",
            ["torch 2.9.1+cu128 in the image, but requirements.txt pins torch==2.13.0"],
        ),
        (
            "2.13.0+cu130",
            None,
            ["requirements.txt pins no torch==X: the image's torch is not the tested one"],
        ),
    ],
)
def test_the_smoke_test_fails_an_image_whose_torch_is_not_the_pinned_one(installed, pinned, problems):
    assert smoke.torch_problems(installed, pinned) == problems


@pytest.mark.parametrize(
    ("env_value", "names"),
    [
        (None, ["libnccl-net.so"]),  # NCCL's default, found through LD_LIBRARY_PATH
        ("ofi", ["ofi", "libnccl-net-ofi.so"]),
        ("libnccl-net-ofi.so", ["libnccl-net-ofi.so"]),
        (
            "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so",
            ["/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net-ofi.so"],
        ),
        ("aws-ofi,ofi", ["aws-ofi", "libnccl-net-aws-ofi.so", "ofi", "libnccl-net-ofi.so"]),
        ("none", []),
        ("NONE", []),
    ],
)
def test_the_plugin_names_are_the_ones_nccl_opens(env_value, names):
    assert smoke.plugin_names(env_value) == names


def fake_plugins(libraries: dict[str, range | OSError]):
    """open_lib over fake symbol tables: a library exports ncclNetPlugin_v<N> for each N given, or
    fails to open with the error given."""

    def open_lib(name: str):
        exported = libraries.get(
            name, OSError(f"{name}: cannot open shared object file: No such file or directory")
        )
        if isinstance(exported, OSError):
            raise exported
        return lambda symbol: symbol in {f"ncclNetPlugin_v{v}" for v in exported}

    return open_lib


AWS_OFI_NCCL_1_17_2 = range(2, 12)  # exports v2..v11
AWS_OFI_NCCL_1_14 = range(2, 10)  # v2..v9


@pytest.mark.parametrize(
    ("nccl", "plugin", "found"),
    [
        ((2, 29, 7), AWS_OFI_NCCL_1_17_2, "torch's NCCL 2.29.7 loads v11"),  # torch 2.13's NCCL
        ((2, 27, 5), AWS_OFI_NCCL_1_17_2, "torch's NCCL 2.27.5 loads v10"),
        ((2, 30, 7), AWS_OFI_NCCL_1_17_2, "torch's NCCL 2.30.7 loads v11"),
        ((2, 29, 7), AWS_OFI_NCCL_1_14, "torch's NCCL 2.29.7 loads v9"),
        ((2, 31, 0), range(2, 13), "torch's NCCL 2.31.0 loads v12"),  # newer: as the newest known
    ],
)
def test_the_smoke_test_reports_the_ncclnet_version_nccl_would_take(nccl, plugin, found):
    report, problems = smoke.net_plugin_check(nccl, None, fake_plugins({"libnccl-net.so": plugin}))
    assert problems == []
    assert report.startswith("libnccl-net.so exports ncclNet v2, ")
    assert report.endswith(found)


def test_the_smoke_test_fails_a_plugin_whose_versions_nccl_does_not_load():
    _, problems = smoke.net_plugin_check((2, 29, 7), None, fake_plugins({"libnccl-net.so": range(12, 14)}))
    assert problems == [
        "libnccl-net.so exports ncclNet v12, v13; torch's NCCL 2.29.7 loads only v6-v11: "
        "it would fall back to sockets (no EFA)"
    ]


def test_the_smoke_test_fails_a_plugin_that_does_not_load():
    """What a plugin built against a missing library (libfabric off the path) looks like."""
    missing = OSError("libfabric.so.1: cannot open shared object file: No such file or directory")
    report, problems = smoke.net_plugin_check((2, 29, 7), None, fake_plugins({"libnccl-net.so": missing}))
    assert report == ""
    assert problems == [
        "NCCL could not load its network plugin (libnccl-net.so: libfabric.so.1: cannot open shared "
        "object file: No such file or directory): no EFA"
    ]


def test_the_smoke_test_follows_nccl_net_plugin_as_nccl_reads_it():
    plugins = fake_plugins({"libnccl-net-ofi.so": AWS_OFI_NCCL_1_17_2})
    report, problems = smoke.net_plugin_check((2, 29, 7), "ofi", plugins)
    assert problems == [] and report.startswith("libnccl-net-ofi.so exports")
    assert smoke.net_plugin_check((2, 29, 7), None, plugins)[1][0].startswith(
        "NCCL could not load its network plugin (libnccl-net.so: "
    )
    assert smoke.net_plugin_check((2, 29, 7), "none", plugins) == (
        "",
        ["NCCL_NET_PLUGIN=none: NCCL would load no network plugin (no EFA)"],
    )
    assert smoke.net_plugin_check((2, 26, 6), None, plugins)[1] == [
        "NCCL 2.26.6 is older than 2.27: no known ncclNet versions to check"
    ]


def test_dlopen_symbols_reads_a_real_librarys_exports():
    """The real loader on a library this machine has: libc exports malloc, no ncclNet plugin."""
    has = smoke.dlopen_symbols("libc.so.6")
    assert has("malloc") and not has("ncclNetPlugin_v11")
    with pytest.raises(OSError, match=r"libnccl-net-absent\.so"):
        smoke.dlopen_symbols("libnccl-net-absent.so")
