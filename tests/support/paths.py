"""Where the project and the upstream files it is tested against are (../shared, or a path in an
environment variable); a test skips with the reason when they are missing."""

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
        pytest.skip(f"upstream {kind} not found at {path} (set {env_var} to a copy of shared/{kind})")
    return path
