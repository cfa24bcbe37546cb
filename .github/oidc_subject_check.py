"""Fails a workflow job, with one clear line, unless the repository's OIDC subject carries the
workflow (`job_workflow_ref`), which every trainstack role's trust names: without it the token's
subject matches no role, and AWS would answer with an opaque AccessDenied instead."""

import json
import os
import sys
import urllib.request

# The same claims as components/ci_access.py SUBJECT_CLAIMS (a test keeps them equal).
EXPECTED = ["repo", "context", "job_workflow_ref"]

url = f"{os.environ['GITHUB_API_URL']}/repos/{os.environ['GITHUB_REPOSITORY']}/actions/oidc/customization/sub"
request = urllib.request.Request(url, headers={"Authorization": f"Bearer {os.environ['GH_TOKEN']}"})
with urllib.request.urlopen(request, timeout=30) as response:
    found = json.load(response)
claims = [] if found.get("use_default", True) else found.get("include_claim_keys", [])
if claims != EXPECTED:
    print(
        f"::error::the repository's OIDC subject claims are {claims or 'the default'}, not {EXPECTED}: "
        "no trainstack role trusts this token (docs/ci.md, one-time bootstrap)"
    )
    sys.exit(1)
