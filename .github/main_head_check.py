"""Fails a deploy job, with one clear line, unless the commit it deploys is main's head now: the
deploy role trusts `deploy.yml` on `refs/heads/main`, a ref, and re-running an older run of that
workflow presents the same claims, so without this a re-run would roll the stack back to an old
commit with no review (and the environment's approval given for the newer one)."""

import json
import os
import sys
import urllib.request

repository, deployed = os.environ["GITHUB_REPOSITORY"], os.environ["GITHUB_SHA"]
url = f"{os.environ['GITHUB_API_URL']}/repos/{repository}/commits/main"
request = urllib.request.Request(url, headers={"Authorization": f"Bearer {os.environ['GH_TOKEN']}"})
with urllib.request.urlopen(request, timeout=30) as response:
    head = json.load(response)["sha"]
if head != deployed:
    print(
        f"::error::this run deploys {deployed[:12]}, and main is at {head[:12]}: a re-run of an older "
        "deploy would roll the stack back without review; revert on main instead (docs/ci.md)"
    )
    sys.exit(1)
