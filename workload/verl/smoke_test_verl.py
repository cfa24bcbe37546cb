"""Run inside the freshly built VERL image before it is pushed (buildspec.yml, target verl).

Checks that the EFA stack is in the image (VERL's own image has none), that NCCL can load the
aws-ofi-nccl plugin as it would for a job, that verl is the version its lock pins,
and that the entrypoint VERL jobs run imports. The NCCL checks are the training image's
(smoke_test.py, copied next to this file).
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import version
from pathlib import Path

import torch
from smoke_test import efa_problems, nccl_problems

LOCK = Path(__file__).with_name("verl-requirements.lock")  # workload/verl/requirements.lock in the image


def locked_version(package: str, lock: Path = LOCK) -> str | None:
    """The version a hashed lock pins (`package==X \\` with its hashes on the lines after)."""
    found = re.search(rf"^{re.escape(package)}==([^\s\\]+)", lock.read_text(), re.MULTILINE)
    return found.group(1) if found else None


def main() -> int:
    problems = efa_problems()
    pinned, installed = locked_version("verl"), version("verl")
    if installed != pinned:
        problems.append(f"verl {installed} in the image, but {LOCK.name} pins verl=={pinned}")
    nccl = torch.cuda.nccl.version() if torch.backends.cuda.is_built() else None
    problems += nccl_problems(nccl)
    import verl.trainer.main_ppo  # noqa: F401  (what every VERL RayJob runs)

    print(f"verl {installed}, torch {torch.__version__}, NCCL {'.'.join(map(str, nccl or ())) or 'n/a'}")
    if problems:
        print("smoke test failed: " + "; ".join(problems))
        return 1
    print("smoke test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
