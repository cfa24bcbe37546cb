"""Run the unchanged Pulumi program under the offline engine and return what it registered.

`run_program` sets up one run as `pulumi up` would: the stack's config, an `OfflineAccount` (with any
facts a test or user gives), `OfflineMocks` answering through a `RecordingMonitor`, the program's
`pulumi.log` messages kept, and the account's boto3 answers and the cluster's API answers
(`OfflineCluster`, as the program's Kubernetes client factory) in place while the program runs; it
returns a `PlanRun`. It also owns the event loops the mock engine runs on: each worker thread gets
a loop of its own, and `close_event_loops` closes them all after a plan.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import runpy
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from account_checks.world import World
from config import PROJECT, PROJECT_ROOT
from offline.engine import pulumi_wire
from offline.engine.aws_answers import OFFLINE_CALLER_ARN
from offline.engine.cluster_answers import OfflineCluster, split_facts
from offline.engine.mocks import OfflineMocks
from offline.engine.recording import PlanRun, Registration
from offline.engine.world import offline_world
from offline.simulated_account import OfflineAccount


def _freeze_what_a_full_collection_kept(phase: str, info: dict) -> None:
    if phase == "stop" and info["generation"] == 2:
        gc.freeze()


def freeze_what_full_collections_keep() -> None:
    """Python's collector, set for a process that plans stacks: the Pulumi SDK keeps every
    resource's Outputs, futures and tasks alive until the program ends, and their churn starts a
    full collection every few dozen registrations, each walking them all again (about 40% of a
    plan's CPU time). What a full collection kept is moved out of its sight (`gc.freeze`), so the
    next walks only newer objects. Installed once per process, however many plans run in it. Not
    for a live `pulumi up` (the program leaves Python's collector be): garbage frozen in a cycle is
    never finalized, and asyncio reports a task's unretrieved error only from a finalizer."""
    if _freeze_what_a_full_collection_kept not in gc.callbacks:
        gc.callbacks.append(_freeze_what_a_full_collection_kept)


def run_program(
    stack: str,
    config: dict[str, str],
    secret_keys: list[str] | None = None,
    program: Path = PROJECT_ROOT / "__main__.py",
    caller_arn: str = OFFLINE_CALLER_ARN,
    facts: dict[str, Any] | None = None,
    registered: list[Registration] | None = None,
    world: World | None = None,
) -> PlanRun:
    """Run `program` as `pulumi up` would, against the mock engine, and return what it registered.
        `facts` change what the offline account answers (see offline/simulated_account.py), and what the
        cluster runs (`cluster-objects:...`, offline/engine/cluster_answers.py); `registered`, when
        given, receives each registration as it happens (so a failed run shows how far it got). The
    program runs in `world` (default: offline_world, with this run's account and cluster answering)."""
    freeze_what_full_collections_keep()
    _fresh_event_loop()
    pulumi_wire.reset_runtime(dict(config), list(secret_keys or []))
    region = config.get("aws:region", "us-east-1")
    account_facts, objects = split_facts(facts)
    account = OfflineAccount(region, account_facts)
    monitor = pulumi_wire.RecordingMonitor(OfflineMocks(region, caller_arn, account))
    if registered is not None:
        monitor.registrations = registered
    messages: list[str] = []
    pulumi_wire.install(monitor, project=PROJECT, stack=stack, logger=_recording_logger(messages))

    def program_main():
        runpy.run_path(str(program), {"WORLD": world or offline_world(cluster)}, run_name="__main__")

    cluster = OfflineCluster(objects)
    with account.botocore_answers():
        pulumi_wire.run_stack(program_main)
    return PlanRun(
        stack,
        monitor.registrations,
        pulumi_wire.stack_outputs(),
        messages,
        objects,
        cluster.requests,
        account,
    )


class _Recorder(logging.Handler):
    def __init__(self, messages: list[str]):
        super().__init__(logging.DEBUG)
        self.messages = messages

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _recording_logger(messages: list[str]) -> logging.Logger:
    logger = logging.getLogger(f"{__package__}.program")
    logger.handlers[:] = [_Recorder(messages)]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


# Event loops the mock engine's worker threads run on (pulumi's monitor calls go through the main
# loop's default executor, and each worker thread needs a loop of its own).
_THREAD_LOOPS: list[asyncio.AbstractEventLoop] = []


def _own_event_loop() -> None:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    _THREAD_LOOPS.append(loop)


def _fresh_event_loop() -> None:
    """A usable loop for this run (also after `close_event_loops`), whose worker threads' loops
    are known, so they can be closed rather than left to the garbage collector."""
    try:
        loop = asyncio.get_event_loop()
        if loop.is_closed():
            raise RuntimeError("closed")
    except RuntimeError:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
    if not getattr(loop, "_trainstack_executor", False):
        loop.set_default_executor(ThreadPoolExecutor(initializer=_own_event_loop))
        loop._trainstack_executor = True


def close_event_loops() -> None:
    """Close the mock engine's event loops: left to interpreter shutdown or the garbage collector,
    closing them can print `Exception ignored ... Invalid file descriptor` after a successful plan."""
    try:
        loop = asyncio.get_event_loop()
    except RuntimeError:
        return
    if not loop.is_closed():
        loop.run_until_complete(loop.shutdown_default_executor())  # joins the worker threads
        loop.close()
    while _THREAD_LOOPS:
        _THREAD_LOOPS.pop().close()
    asyncio.set_event_loop(None)  # a later run in this process starts a fresh loop
