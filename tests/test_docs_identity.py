"""The docs say how Pod Identity relates to IRSA (issue #47), and what they say of the trust is the
plan's: a job's role trusts pods.eks.amazonaws.com with sts:AssumeRole and sts:TagSession."""

from __future__ import annotations

import json

from support.paths import ROOT
from support.plans import plan


def test_security_doc_compares_pod_identity_with_irsa_as_the_plan_trusts():
    text = (ROOT / "docs" / "security.md").read_text()
    assert "**Pod Identity, not IRSA.**" in text
    run = plan("dev")
    job = next(iter(run.outputs["jobs"]))
    role = run.one("aws:iam/role:Role", f"training-pods-{job}-role")
    (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
    assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert "`pods.eks.amazonaws.com`" in text and "(`sts:AssumeRole` and `sts:TagSession`)" in text
