"""Fails a job, with one clear line, unless its GitHub environment (`ENVIRONMENT`) requires a
reviewer: a job names its environment, and GitHub creates a missing one unprotected, so a preview
whose `<stack>-preview` environment was never set up would take the role that reads the stack's
state and decrypts its secrets with no person's approval of the pull request's code."""

import json
import os
import sys
import urllib.parse
import urllib.request

environment = os.environ["ENVIRONMENT"]
url = (
    f"{os.environ['GITHUB_API_URL']}/repos/{os.environ['GITHUB_REPOSITORY']}/environments/"
    f"{urllib.parse.quote(environment, safe='')}"
)
request = urllib.request.Request(url, headers={"Authorization": f"Bearer {os.environ['GH_TOKEN']}"})
with urllib.request.urlopen(request, timeout=30) as response:
    found = json.load(response)
reviewers = [
    reviewer
    for rule in found.get("protection_rules") or []
    if rule.get("type") == "required_reviewers"
    for reviewer in rule.get("reviewers") or []
]
if not reviewers:
    print(
        f"::error::the environment {environment} requires no reviewer, so this job ran with nobody's "
        "approval; add required reviewers to it (docs/ci.md, one-time bootstrap) before it takes a role"
    )
    sys.exit(1)
