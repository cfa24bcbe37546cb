"""Fixtures every layer's tests share (plans of the templates, an S3 server on loopback) and the
order the suite runs in; the helpers themselves are in tests/support/."""

from __future__ import annotations

import os

import pytest
from support.plans import plan
from xdist.plugin import pytest_xdist_auto_num_workers as xdist_per_core

from offline.engine import PlanRun, freeze_what_full_collections_keep

# A worker holds hundreds of thousands of objects (torch, Pulumi, moto, the Kubernetes client) and
# plans hundreds of stacks: the offline engine's collector setting (offline/engine/runner.py) from
# the start, collection included. The cost is memory: a worker ends `make test` at about 2 GB.
freeze_what_full_collections_keep()


@pytest.fixture(scope="session")
def dev_plan() -> PlanRun:
    return plan("dev")


@pytest.fixture(scope="session")
def prod_plan() -> PlanRun:
    return plan("prod")


# Credentials and a region moto takes: never a real account's.
FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture
def fake_aws(monkeypatch):
    """FAKE_AWS in the environment, for moto in this process (no endpoint left from a moto server)."""
    for key, value in FAKE_AWS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


@pytest.fixture
def moto_server(monkeypatch):
    """An S3 endpoint on loopback (moto's server) for processes the test starts, with bucket `ckpt`."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", **FAKE_AWS}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    boto3.client("s3").create_bucket(Bucket="ckpt")
    yield env
    server.stop()


@pytest.hookimpl(optionalhook=True)  # xdist's hook: a run with `-p no:xdist` has no such hook
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (`make test`): xdist's count (a worker per core) and one more. The suite's tests
    wait a good part of their time on processes they started (pods' rendezvous and detection
    timeouts, servers coming up); with a worker per core both cores were idle 6-8% of a run, which
    the extra worker fills: on the 2-core machine 5 min 19 s instead of 5 min 36 s, and 5 min 22 s
    instead of 5 min 30 s, back to back (the cores also do 4-8% more work: a third collection, more
    switching). A count set in PYTEST_XDIST_AUTO_NUM_WORKERS is xdist's to read, as it is."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    return xdist_per_core(config) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Real training runs first, longest first (`slow(seconds=...)`): on the workers of `make test`
    they start at once and the many short tests fill in beside them, instead of one long run
    starting last."""

    def weight(item: pytest.Item) -> float:
        slow = item.get_closest_marker("slow")
        return -slow.kwargs.get("seconds", 10) if slow else 0

    items.sort(key=weight)
