"""Where the project and the upstream files it is tested against are (../shared, or a path in an
environment variable), and what a test does when something it needs is missing (`missing`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "workload"  # the training image's build context: `trainer` imports from here


def shared_dir(kind: str, env_var: str) -> Path:
    """An upstream folder of ../shared (charts, crds), or the path in `env_var`; skip without it.
    Upstream files are read from there, never copied into the project."""
    path = Path(os.environ.get(env_var) or ROOT.parent / "shared" / kind)
    if not path.is_dir():
        missing(f"upstream {kind} not found at {path} (set {env_var} to a copy of shared/{kind})")
    return path


# Set by `make test` (and so by CI): everything a test needs is installed or built first, so a
# missing piece is a failure of the setup, never a reason to pass.
REQUIRE_ALL = "TRAINSTACK_REQUIRE_UPSTREAM"


def missing(reason: str) -> None:
    """Something the test needs is absent: under `make test` it fails with `reason`, one sentence;
    in a bare `pytest` run it skips."""
    if os.environ.get(REQUIRE_ALL) == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)
