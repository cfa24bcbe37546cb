"""Where `make cluster-bins` put the upstream programs, and the upstream files (kwok's stages, the
operators' manifests) read from the very module versions tools/cluster/*/go.mod pin."""

from __future__ import annotations

import os
import re
import subprocess
from functools import cache
from pathlib import Path

from support.paths import ROOT, missing

TOOLS = ROOT / "tools" / "cluster"
BIN = Path(os.environ.get("TRAINSTACK_CLUSTER_BIN") or ROOT / ".tools" / "cluster" / "bin")


def programs() -> list[tuple[str, str, str, str]]:
    """(folder, binary, main package, module) per line of tools/cluster/programs."""
    rows = []
    for line in (TOOLS / "programs").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            folder, binary, package, module = line.split()
            rows.append((folder, binary, package, module))
    return rows


def pinned(folder: str, module: str) -> str:
    """The version of `module` that tools/cluster/<folder>/go.mod requires."""
    found = re.search(
        rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", (TOOLS / folder / "go.mod").read_text(), re.M
    )
    if not found:
        raise LookupError(f"{module} is not required in tools/cluster/{folder}/go.mod")
    return found.group(1)


def binary(name: str) -> str:
    path = BIN / name
    if not path.is_file():
        missing(f"{path} is missing: `make cluster-bins` builds it")
    return str(path)


@cache
def module_dir(folder: str, module: str) -> Path:
    """The module's source in Go's module cache (the build downloaded it), for its shipped files."""
    done = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", module],
        cwd=TOOLS / folder,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GOFLAGS": "-mod=mod"},
    )
    if done.returncode != 0 or not done.stdout.strip():
        missing(f"no source of {module} in Go's module cache: `make cluster-bins` downloads it")
    return Path(done.stdout.strip())
