"""`trainstack logs JOB`: the logs of every pod of a job (or of one node rank's), each line
prefixed with the pod's role; --follow streams them all at once.

Fetched first: the job's pods, by node rank. A log is a stream, so its lines are rendered as they
are read, one pod after another (or, following, as each pod writes them)."""

from __future__ import annotations

import argparse
import json
import threading

from cli.analysis import phases
from cli.errors import EXIT_FAILED, CliError
from cli.kube import Cluster
from cli.output import Output
from cli.stack import connect, known_job, load_outputs


def run(args: argparse.Namespace, out: Output) -> int:
    cluster, pods = fetch(args)
    if not pods:
        out.line(f"no pods of job {args.job}" + (f" with rank {args.rank}" if args.rank is not None else ""))
        return EXIT_FAILED
    if args.follow:
        return follow(args, cluster, pods, Lines(out))
    return render(args, cluster, pods, Lines(out))


def fetch(args: argparse.Namespace) -> tuple[Cluster, list[dict]]:
    """The job's pods, by node rank (pods without one last), only --rank's if given."""
    outputs = load_outputs(args)
    known_job(outputs, args.job)
    cluster = connect(args, outputs)
    pods = sorted(
        cluster.job_pods(args.job), key=lambda p: (phases.pod_rank(p) is None, phases.pod_rank(p) or 0)
    )
    if args.rank is not None:
        pods = [p for p in pods if phases.pod_rank(p) == args.rank]
    return cluster, pods


class Lines:
    """One log line out, whole, whichever pod's thread says it."""

    def __init__(self, out: Output):
        self.out = out
        self.lock = threading.Lock()

    def emit(self, pod: dict, line: str) -> None:
        role = phases.pod_role(pod)
        with self.lock:
            if self.out.as_json:
                self.out.line(json.dumps({"pod": pod["metadata"]["name"], "role": role, "line": line}))
            else:
                self.out.line(f"[{role}] {line}")


def render(args: argparse.Namespace, cluster: Cluster, pods: list[dict], lines: Lines) -> int:
    for pod in pods:
        for line in cluster.log(pod["metadata"]["name"], tail=args.tail, since=args.since).splitlines():
            lines.emit(pod, line)
    return 0


def follow(args: argparse.Namespace, cluster: Cluster, pods: list[dict], lines: Lines) -> int:
    failures: list[CliError] = []

    def one(p: dict) -> None:
        try:
            for line in cluster.follow(p["metadata"]["name"], args.tail, args.since):
                lines.emit(p, line)
        except CliError as err:
            failures.append(err)
        except Exception as err:  # the stream broke off mid-way
            failures.append(
                CliError(f"following the log of {p['metadata']['name']} stopped: {err}", EXIT_FAILED)
            )

    threads = [threading.Thread(target=one, args=(pod,), daemon=True) for pod in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    return 0
