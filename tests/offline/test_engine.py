"""The offline engine itself: what it answers where a real provider does more than echo its inputs
(pulumi-eks's children and refusals), and where its use of Pulumi's private APIs lives."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest
from support.plans import plan

import offline.engine
from offline.engine import EKS_CLUSTER_SECURITY_GROUP, OfflineMocks, ProviderRefusal

ENGINE = Path(offline.engine.__file__).parent


def test_the_offline_engine_refuses_the_creators_second_entry_as_eks_does():
    import pulumi

    mocks = OfflineMocks("us-east-1", "arn:aws:sts::123456789012:assumed-role/PlatformAdmin/alice")
    args = pulumi.runtime.MockResourceArgs(
        typ="eks:index:Cluster",
        name="eks",
        inputs={
            "name": "c",
            "accessEntries": {"admin-0": {"principalArn": "arn:aws:iam::123456789012:role/PlatformAdmin"}},
        },
        provider="",
        resource_id="",
        custom=False,
    )
    with pytest.raises(ProviderRefusal, match="ResourceInUseException"):
        mocks.new_resource(args)


def test_cluster_security_group_output_matches_pulumi_eks():
    """pulumi-eks returns its own group unless skipDefaultSecurityGroups; the engine does the same."""
    import pulumi

    def outputs(skip):
        args = pulumi.runtime.MockResourceArgs(
            typ="eks:index:Cluster",
            name="eks",
            inputs={"name": "c", "skipDefaultSecurityGroups": skip},
            provider="",
            resource_id="",
            custom=False,
        )
        return mocks.new_resource(args)[1]

    mocks = OfflineMocks("us-east-1")
    assert outputs(False)["clusterSecurityGroupId"] != EKS_CLUSTER_SECURITY_GROUP
    assert outputs(True)["clusterSecurityGroupId"] == EKS_CLUSTER_SECURITY_GROUP


def _private_pulumi_imports(path: Path) -> list[str]:
    """Imports of the Pulumi SDK beyond `pulumi` and `pulumi.runtime`'s public names, and of the
    wire types under it (protobuf, grpc)."""
    import pulumi.runtime

    public = {n for n in pulumi.runtime.__all__ if not inspect.ismodule(getattr(pulumi.runtime, n, None))}
    private_roots = ("pulumi.", "google.protobuf", "grpc")
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith(private_roots)]
        elif isinstance(node, ast.ImportFrom) and node.module == "pulumi.runtime":
            found += [f"pulumi.runtime.{a.name}" for a in node.names if a.name not in public]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(private_roots):
            found.append(node.module)
    return found


def test_only_pulumi_wire_uses_pulumis_private_apis():
    users = {p.name: _private_pulumi_imports(p) for p in sorted(ENGINE.glob("*.py"))}
    assert {name for name, found in users.items() if found} == {"pulumi_wire.py"}, users


def test_plans_leave_pickle_as_they_found_it():
    """The dev stack registers a dynamic resource (the image build trigger), whose provider the SDK
    pickles after patching pickle's Python pickler for good: a worker that planned hundreds of
    stacks overflowed the stack in its next dill pickling."""
    import pickle

    before = (pickle._Pickler._batch_setitems, pickle._Pickler.save_dict)
    for _ in range(2):
        run = plan("dev")
        assert run.by_type("pulumi-python:dynamic:Resource")
    assert (pickle._Pickler._batch_setitems, pickle._Pickler.save_dict) == before


def test_the_offline_engine_sets_the_collector_once_however_many_plans_it_runs():
    """Each plan freezes what full collections kept (offline/engine/runner.py), set once per
    process; a live `pulumi up` runs the program with Python's collector as it is."""
    import gc

    from offline.engine import runner

    hook = runner._freeze_what_a_full_collection_kept
    saved = list(gc.callbacks)
    gc.callbacks[:] = [c for c in saved if c is not hook]  # the collector reads this very list
    try:
        plan("dev")
        plan("dev")
        assert gc.callbacks.count(hook) == 1
    finally:
        gc.callbacks[:] = saved
