"""`trainstack doctor`: the checks an EKS training engineer runs, each a finding with a fix when it
fails. Exit 1 if any failed."""

from __future__ import annotations

import argparse

from cli.analysis import findings, phases
from cli.analysis.view import ClusterView, Finding
from cli.errors import EXIT_FAILED
from cli.output import Output
from cli.stack import connect, job_kinds, load_outputs


def run(args: argparse.Namespace, out: Output) -> int:
    return render(findings.doctor(fetch(args, out)), out)


def fetch(args: argparse.Namespace, out: Output) -> ClusterView:
    """Everything the findings look at, read once: the cluster's objects, and each pod's recent log
    (and its crashed run's, if it restarted)."""
    outputs = load_outputs(args)
    cluster = connect(args, outputs)
    out.progress("reading the cluster ...")
    pods = cluster.pods()
    view = ClusterView(
        nodes=cluster.nodes(),
        node_events=cluster.node_events(),
        daemonsets=cluster.daemonsets(),
        deployments=cluster.deployments(),
        crds=cluster.crds(),
        webhooks=cluster.webhooks(),
        pods=pods,
        gpu_groups=outputs.get("gpuNodeGroups") or {},
        jobs={name: kind for name, kind in job_kinds(outputs).items() if cluster.job(kind, name)},
        workloads=cluster.workloads(),
        provisioning_requests=cluster.provisioning_requests(),
        driver_needed=outputs.get("driverNeeded"),
    )
    for pod in pods:
        out.progress(f"reading logs of {pod['metadata']['name']} ...")
        view.logs[pod["metadata"]["name"]] = cluster.log(pod["metadata"]["name"], tail=2000)
        if phases.restarts(pod):
            view.previous_logs[pod["metadata"]["name"]] = cluster.log(
                pod["metadata"]["name"], tail=50, previous=True
            )
    out.done()
    return view


def render(found: list[Finding], out: Output) -> int:
    failed = [f for f in found if not f.ok]
    if out.as_json:
        out.dump({"checks": [f.as_json() for f in found], "failed": len(failed)})
    else:
        for f in found:
            mark = out.colour("PASS" if f.ok else "FAIL", f.ok)
            out.line(f"{mark}  {f.name}: {f.detail}")
            if not f.ok and f.fix:
                out.line(f"      fix: {f.fix}")
        out.line(f"\n{len(found) - len(failed)} passed, {len(failed)} failed")
    return EXIT_FAILED if failed else 0
