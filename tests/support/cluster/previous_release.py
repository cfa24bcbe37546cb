"""The release before the shared-cluster work (issue 57), as its users ran it: its source at that
commit of this repository's history, extracted with `git archive`, beside a `shared` link to the
`../shared` a checkout has beside it. A clone without that commit (a shallow one) fails the scenario
that needs it, with this sentence."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from support.paths import ROOT

# The last commit before the stack kept other stacks' and the user's objects apart on shared
# clusters: per-stack labels and names, the earlier ownership record migrated.
PREVIOUS_RELEASE = "2410179198e76763970f67be94b9464021e89a6a"


def previous_source(directory: Path) -> Path:
    """The previous release's program under `directory`/previous, its `../shared` resolving."""
    known = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{PREVIOUS_RELEASE}^{{commit}}"], check=False
    )
    if known.returncode != 0:
        pytest.fail(
            f"the previous release's commit {PREVIOUS_RELEASE[:12]} is not in this clone's history: "
            "clone with history (not --depth) to run the upgrade scenario"
        )
    root = directory / "previous"
    root.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS_RELEASE], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    (directory / "shared").symlink_to(ROOT.parent / "shared")
    return root
