"""The stack's own-cluster planes up to compute, then the datasets plane: run by
tests/planes/test_datasets.py under the offline engine (planes/__init__.py composes the full stack)."""

import pulumi

from config import load_config
from planes.account import account_checks, aws_account
from planes.build import build_plane
from planes.ci import ci_access
from planes.compute import compute_plane
from planes.datasets import datasets_plane

cfg = load_config()
account = aws_account(cfg)
facts = account_checks(cfg, account)
ci = ci_access(cfg, account)
account = account.with_boundary(ci.boundary if ci else None)
build = build_plane(cfg, account)
compute = compute_plane(cfg, account, facts, build.bucket, ci)
prepared = datasets_plane(cfg, build, compute)
pulumi.export(
    "datasets",
    {name: {"args": p.trainer_args(), "job": p.job_name} for name, p in prepared.items()},
)
