"""Nothing in the images is fetched unpinned (issue #37): the bases by digest, the EFA installer
checked against its SHA-256 before it runs, every Python package from a hashed lock that agrees
with workload/requirements.txt, verl baked into the VERL image at components/jobs/verl.py's version.
No Docker here: the files are read, and the EFA script runs against a fake download."""

from __future__ import annotations

import hashlib
import io
import os
import re
import subprocess
import tarfile
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support.paths import WORKLOAD

from components.jobs.verl import VERL_IMAGE, VERL_VERSION
from config.build import ImageConfig

DOCKERFILE = (WORKLOAD / "Dockerfile").read_text()
LOCK = WORKLOAD / "requirements.lock"
VERL_LOCK = WORKLOAD / "verl" / "requirements.lock"
INSTALL_EFA = WORKLOAD / "efa" / "install.sh"
HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")
# The image's platform (workload/Dockerfile: Ubuntu 24.04, its Python 3.12, linux/amd64).
IMAGE_PYTHON = {
    **default_environment(),
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}


def lock_entries(lock: Path) -> dict[str, tuple[str, list[str]]]:
    """{canonical name: (requirement line, its hashes)} of a hashed lock, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", lock.read_text())
    entries = {}
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        spec = line.split(" --hash=")[0].strip()
        name = canonicalize_name(Requirement(spec).name)
        assert name not in entries, f"{name} locked twice"
        entries[name] = (spec, HASH.findall(line))
    return entries


def pins(requirements: Path) -> dict[str, tuple[str, set[str]]]:
    """{canonical name: (version, extras)} of a requirements file's `name[extras]==X` lines."""
    found = {}
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            found[canonicalize_name(req.name)] = (spec.version, set(req.extras))
    return found


def test_every_locked_package_is_pinned_and_hashed():
    entries = lock_entries(LOCK)
    assert len(entries) > 50  # the transitive closure, not just requirements.txt's eight
    for name, (spec, hashes) in entries.items():
        assert re.fullmatch(rf"{re.escape(name)}==[0-9][0-9A-Za-z.+!-]*", spec.lower().replace("_", "-")), (
            spec
        )
        assert hashes, f"{spec} carries no --hash"


def test_the_lock_agrees_with_the_requirements_pins():
    locked = {name: spec.split("==")[1] for name, (spec, _) in lock_entries(LOCK).items()}
    for name, (version, _) in pins(WORKLOAD / "requirements.txt").items():
        assert locked.get(name) == version, (
            f"requirements.txt pins {name}=={version}, the lock {locked.get(name)}"
        )


def test_the_lock_holds_every_dependency_of_what_it_locks():
    """pip resolves nothing in the image (--no-deps): each locked package's requirements on the
    image's Python, extras the requirements ask for included, must be in the lock. Read from the
    metadata of the locked releases this environment has installed at the same version (the CPU
    torch the tests run is another build, and is left out)."""
    entries = lock_entries(LOCK)
    locked = {name: spec.split("==")[1] for name, (spec, _) in entries.items()}
    extras = {name: wanted for name, (_, wanted) in pins(WORKLOAD / "requirements.txt").items()}
    checked, missing = 0, []
    for name, version in locked.items():
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for line in dist.requires or []:
            req = Requirement(line)
            asked = {""} | extras.get(name, set())
            if req.marker and not any(req.marker.evaluate({**IMAGE_PYTHON, "extra": e}) for e in asked):
                continue
            dep = canonicalize_name(req.name)
            if dep not in locked or not req.specifier.contains(locked[dep], prereleases=True):
                missing.append(f"{name} {version} needs {line}; the lock has {locked.get(dep)}")
    assert checked > 20  # ray, boto3, datasets, mlflow-skinny and most of what they pull in
    assert missing == []


def test_a_lock_line_without_a_hash_is_caught(tmp_path):
    lock = tmp_path / "requirements.lock"
    lock.write_text("six==1.17.0 \\\n    --hash=sha256:" + "a" * 64 + "\nnumpy==2.5.5\n")
    assert lock_entries(lock)["numpy"] == ("numpy==2.5.5", [])


def test_every_pip_install_in_the_images_is_hashed_and_resolves_nothing():
    joined = re.sub(r"\\\n", " ", DOCKERFILE).splitlines()
    installs = [line for line in joined if line.startswith("RUN ") and "pip install" in line]
    assert len(installs) == 3  # the training image's packages, nccl-tests' compiler, the VERL image's verl
    for line in installs:
        assert "--require-hashes" in line and "--no-deps" in line and "--only-binary=:all:" in line, line
        assert re.search(r"-r \S*requirements\.lock$", line), line
    assert "COPY requirements.txt requirements.lock ./" in DOCKERFILE


def test_the_bases_are_pinned_by_digest():
    digest = r"@sha256:[0-9a-f]{64}"
    base = ImageConfig().base_image
    assert re.fullmatch(rf"nvidia/cuda:13\.0\.3-base-ubuntu24\.04{digest}", base)
    assert f"ARG BASE_IMAGE={base}\n" in DOCKERFILE
    assert re.fullmatch(rf"verlai/verl:[\w.-]+{digest}", VERL_IMAGE)
    assert f"ARG VERL_BASE_IMAGE={VERL_IMAGE}\n" in DOCKERFILE
    froms = re.findall(r"^FROM (\S+) AS ([\w-]+)$", DOCKERFILE, re.MULTILINE)
    assert froms == [
        ("${VERL_BASE_IMAGE}", "verl"),
        ("${BASE_IMAGE}", "nccl-tests"),
        ("${BASE_IMAGE}", "training"),  # the default
    ]


def test_the_verl_image_bakes_the_pinned_verl():
    ((spec, hashes),) = lock_entries(VERL_LOCK).values()
    assert spec == f"verl=={VERL_VERSION}" and len(hashes) == 2  # PyPI's wheel and sdist
    verl_stage = DOCKERFILE.split(" AS verl\n")[1].split("\nFROM ")[0]
    assert "/tmp/install_efa.sh" in verl_stage  # the EFA stack VERL's own image lacks
    assert "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu" in verl_stage  # where NCCL finds the plugin
    assert "COPY verl/requirements.lock /opt/trainstack/verl-requirements.lock" in verl_stage
    assert "-r /opt/trainstack/verl-requirements.lock" in verl_stage
    assert "\nWORKDIR " not in verl_stage  # the base's own: no directory of ours shadows `verl` for jobs


def test_the_verl_smoke_test_reads_the_locked_version(tmp_path):
    import importlib.util

    # It imports the training smoke test's NCCL checks, as in the image: workload/ is on pytest's
    # pythonpath (pyproject.toml), as /opt/trainstack is on the image's.
    spec = importlib.util.spec_from_file_location("smoke_test_verl", WORKLOAD / "verl" / "smoke_test_verl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.locked_version("verl", VERL_LOCK) == VERL_VERSION
    assert module.locked_version("vllm", VERL_LOCK) is None


# The EFA installer, as efa/install.sh gets it: a fake tarball served by a fake curl.


def fake_installer(tmp_path: Path) -> bytes:
    """A tarball whose efa_installer.sh records its arguments."""
    script = b'#!/bin/sh\necho "$@" > "$EFA_RAN"\n'
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("aws-efa-installer/efa_installer.sh")
        info.size, info.mode = len(script), 0o755
        tar.addfile(info, io.BytesIO(script))
    return buffer.getvalue()


def run_install(tmp_path: Path, tarball: bytes, sha256: str) -> tuple[subprocess.CompletedProcess, Path]:
    served = tmp_path / "served.tar.gz"
    served.write_bytes(tarball)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    curl = bin_dir / "curl"
    # curl -fsSL --retry 3 -o <path> <url>: writes the served file, and records the URL.
    curl.write_text(
        f'#!/bin/sh\nwhile [ "$1" != -o ]; do shift; done\ncp {served} "$2"\necho "$3" > {tmp_path}/url\n'
    )
    curl.chmod(0o755)
    ran = tmp_path / "ran"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "EFA_INSTALLER_VERSION": "1.50.0",
        "EFA_INSTALLER_SHA256": sha256,
        "EFA_RAN": str(ran),
        "TMPDIR": str(tmp_path),
    }
    done = subprocess.run(["sh", str(INSTALL_EFA)], env=env, capture_output=True, text=True, check=False)
    return done, ran


def test_the_efa_installer_runs_only_when_its_checksum_matches(tmp_path):
    tarball = fake_installer(tmp_path)
    done, ran = run_install(tmp_path, tarball, hashlib.sha256(tarball).hexdigest())
    assert done.returncode == 0, done.stderr
    assert ran.read_text().split() == ["-y", "--skip-kmod", "--skip-limit-conf", "--no-verify"]
    url = (tmp_path / "url").read_text().strip()
    assert url == "https://efa-installer.amazonaws.com/aws-efa-installer-1.50.0.tar.gz"


def test_a_tampered_efa_installer_never_runs(tmp_path):
    tarball = fake_installer(tmp_path)
    done, ran = run_install(tmp_path, tarball, hashlib.sha256(b"the published one").hexdigest())
    assert done.returncode != 0
    assert "FAILED" in done.stdout + done.stderr  # sha256sum -c's verdict
    assert not ran.exists()


@pytest.mark.parametrize("arg", ["EFA_INSTALLER_VERSION", "EFA_INSTALLER_SHA256"])
def test_both_images_install_efa_at_the_pinned_release_and_checksum(arg):
    (value,) = re.findall(rf"^ARG {arg}=(\S+)$", DOCKERFILE, re.MULTILINE)
    assert re.fullmatch(r"[0-9a-f]{64}" if arg.endswith("SHA256") else r"\d+\.\d+\.\d+", value)
    # Each stage redeclares the global ARG, or the script would see it unset.
    assert DOCKERFILE.count(f"\nARG {arg}\n") == 2
    assert DOCKERFILE.count("COPY efa/install.sh /tmp/install_efa.sh") == 2


def test_nccl_tests_is_built_against_the_nccl_and_cuda_runtime_torch_loads():
    """The health gate's all-reduce must measure the NCCL every job runs: nccl-tests' lock pins the
    training lock's CUDA runtime and NCCL, hashes and all, and its source is checked out by commit."""
    tests_lock, training = lock_entries(WORKLOAD / "nccl-tests" / "requirements.lock"), lock_entries(LOCK)
    for name in ("nvidia-cuda-runtime", "nvidia-nccl-cu13"):
        assert tests_lock[name] == training[name], name
    for spec, hashes in tests_lock.values():
        assert hashes, f"{spec} carries no --hash"
    stage = DOCKERFILE.split(" AS nccl-tests\n")[1].split("\nFROM ")[0]
    assert re.search(r"^ARG NCCL_TESTS_COMMIT=[0-9a-f]{40}$", stage, re.MULTILINE)
    assert 'checkout --detach "${NCCL_TESTS_COMMIT}"' in stage
    assert (
        "COPY --from=nccl-tests /opt/nccl-tests/all_reduce_perf /opt/nccl-tests/all_reduce_perf" in DOCKERFILE
    )
