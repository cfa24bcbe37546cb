"""`trainstack`'s command line: the subcommands, their options, and the types that check them."""

from __future__ import annotations

import argparse
import math
import re
import typing
from collections.abc import Callable
from typing import Any

from cli.errors import EXIT_USAGE


class Parser(argparse.ArgumentParser):
    """argparse, with a mistake said in one line (not the usage block) and exit 2."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def positive(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def fraction(text: str) -> float:
    value = positive(float)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at most 1 (the throughput kept per doubling)")
    return value


def non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return int(text)


SINCE = re.compile(r"([0-9]+)([smhd]?)")


def seconds(text: str) -> int:
    m = SINCE.fullmatch(text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration such as 90s, 10m, 2h")
    return int(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


def parser(description: str) -> argparse.ArgumentParser:
    """Every option has a help line, and one with a default names it (`%(default)s`, or in words
    where the default is looked up: the selected stack, the stack's kubeconfig)."""
    p = Parser(prog="trainstack", description=description)
    common = Parser(add_help=False)
    common.add_argument("--stack", help="pulumi stack (default: the selected one)")
    common.add_argument("--outputs", help="a JSON file of the stack's outputs instead of asking pulumi")
    common.add_argument("--kubeconfig", help="kubeconfig file (default: the stack's)")
    common.add_argument("--namespace", help="namespace of the jobs (default: the stack's)")
    common.add_argument("--json", action="store_true", help="machine-readable output (default: a table)")
    common.add_argument(
        "--timeout",
        type=positive(float),
        default=20.0,
        help="seconds to wait for the cluster per call (default: %(default)g)",
    )
    common.add_argument("--debug", action="store_true", help="show the traceback of an unexpected error")
    common.add_argument(
        "--tracking-uri", help="MLflow server (default: $MLFLOW_TRACKING_URI, or the stack's external one)"
    )
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("status", parents=[common], help="jobs and node groups")
    logs = sub.add_parser("logs", parents=[common], help="logs of every pod of a job")
    logs.add_argument("job", help="a job of the stack (trainstack status lists them)")
    logs.add_argument(
        "--follow",
        "-f",
        action="store_true",
        help="keep printing each pod's new lines as it writes them, until the pods end (Ctrl-C stops)",
    )
    logs.add_argument("--rank", type=non_negative, help="only this node rank's pod (default: every pod)")
    logs.add_argument("--since", type=seconds, help="only lines newer than this, e.g. 10m (default: all)")
    logs.add_argument("--tail", type=non_negative, help="only the last N lines of each pod (default: all)")
    sub.add_parser("doctor", parents=[common], help="checks with a fix for each failure")
    metrics = sub.add_parser("metrics", parents=[common], help="the training curve")
    metrics.add_argument("job", help="a job of the stack that runs the default trainer")
    metrics.add_argument("--plot", help="write loss, tokens/s and MFU against step to this PNG")
    est = sub.add_parser("estimate", parents=[common], help="time and cost to a token budget")
    est.add_argument("job", help="a job of the stack, whose throughput and node price the table scales")
    est.add_argument("--tokens", type=positive(float), required=True, help="token budget, e.g. 1e11")
    est.add_argument(
        "--tokens-per-s", type=positive(float), help="measured throughput (default: the job's latest)"
    )
    est.add_argument(
        "--efficiency",
        type=fraction,
        help="throughput kept per doubling of nodes, instead of the plan's model "
        "(default: the model; 0.9 where the stack has none for the job)",
    )
    est.add_argument(
        "--hourly-usd",
        type=positive(float),
        help="one node's price per hour (default: the job's, from the stack's outputs)",
    )
    est.add_argument(
        "--max-nodes",
        type=positive(int),
        help="largest node count in the table (default: the job's node group's maximum)",
    )
    return p
