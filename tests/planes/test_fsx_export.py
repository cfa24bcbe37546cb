"""S3 keeps what the volume keeps: the trainer prunes the checkpoints it no longer keeps
(storage.checkpointsKept, checkpointKeepEvery) off the shared Lustre volume, and the data repository
association carries those deletions to S3. Before, it did not, and S3 kept every save of a run
until the lifecycle (storage.checkpointRetentionDays) expired it.

The association is modelled offline as the FSx API reference describes AutoExportPolicy: each
file system change of a configured event type (NEW, CHANGED, DELETED) is applied to the linked
S3 prefix; other changes are not exported."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from support.plans import plan
from trainer import checkpoint

DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
JOB = "llama-1b-fsdp"
FSX = {"enabled": True, "storageCapacityGiB": 2400, "throughputPerTiB": 250, "nodeGroups": ["p5"]}


@pytest.fixture(scope="module")
def fsx_prod():
    return plan(
        "prod",
        storage={"encryption": "KMS", "protect": True, "checkpointRetentionDays": 90, "fsx": FSX},
    )


def volume(root: Path) -> dict[str, bytes]:
    """The files under the association's file system path, by path relative to it."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def changes(before: dict[str, bytes], after: dict[str, bytes]) -> list[tuple[str, str]]:
    found = [("NEW", p) for p in after.keys() - before.keys()]
    found += [("CHANGED", p) for p in after.keys() & before.keys() if after[p] != before[p]]
    found += [("DELETED", p) for p in before.keys() - after.keys()]
    return sorted(found)


class Association:
    """What the data repository association does with the volume's changes: exports those of its
    configured event types to s3://<bucket>/<prefix><path>."""

    def __init__(self, inputs: dict, root: Path, s3):
        self.events = set(inputs["s3"]["autoExportPolicy"]["events"])
        bucket, _, self.prefix = inputs["dataRepositoryPath"].removeprefix("s3://").partition("/")
        self.bucket, self.root, self.s3 = bucket, root, s3
        self.seen = volume(root)

    def sync(self) -> None:
        now = volume(self.root)
        for event, path in changes(self.seen, now):
            if event not in self.events:
                continue
            key = f"{self.prefix}{path}"
            if event == "DELETED":
                self.s3.delete_object(Bucket=self.bucket, Key=key)
            else:
                self.s3.put_object(Bucket=self.bucket, Key=key, Body=now[path])
        self.seen = now


def save(job_dir: Path, step: int) -> None:
    """A complete checkpoint as the trainer leaves it: shards, metadata, the marker last."""
    path = checkpoint.step_dir(job_dir, step)
    path.mkdir(parents=True)
    (path / "__0_0.distcp").write_bytes(f"weights {step}".encode())
    (path / checkpoint.METADATA).write_bytes(b"metadata")
    (path / checkpoint.MARKER).write_text(f'{{"step": {step}}}')


def test_a_prune_on_the_volume_prunes_the_s3_copy_too(fsx_prod, tmp_path, monkeypatch):
    dra = fsx_prod.one(DRA).inputs
    assert dra["fileSystemPath"] == "/checkpoints"
    bucket = dra["dataRepositoryPath"].removeprefix("s3://").partition("/")[0]
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=bucket)
        association = Association(dra, tmp_path, s3)
        job_dir = tmp_path / JOB  # the job's subPath checkpoints/<job> of the file system
        for step in (100, 200, 300, 400):
            save(job_dir, step)
            association.sync()
        checkpoint.prune(job_dir, keep=1, every=200)  # what the volume's writer does after a save
        association.sync()

        assert checkpoint.complete_steps(job_dir) == [200, 400]
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="checkpoints/")["Contents"]}
        steps = {int(k.split("/")[2].removeprefix("step_")) for k in keys}
        assert steps == {200, 400}
        for step in steps:
            assert f"checkpoints/{JOB}/step_{step:08d}/{checkpoint.MARKER}" in keys
            assert f"checkpoints/{JOB}/step_{step:08d}/__0_0.distcp" in keys
        # A checkpoint saved again (a resumed run rewrites its newest step) is exported again.
        (checkpoint.step_dir(job_dir, 400) / "__0_0.distcp").write_bytes(b"weights 400, again")
        association.sync()
        body = s3.get_object(Bucket=bucket, Key=f"checkpoints/{JOB}/step_00000400/__0_0.distcp")["Body"]
        assert body.read() == b"weights 400, again"


def test_deletions_go_both_ways_and_pruned_versions_expire_in_a_day(fsx_prod):
    dra = fsx_prod.one(DRA).inputs["s3"]
    assert dra["autoExportPolicy"]["events"] == ["NEW", "CHANGED", "DELETED"]
    # What the lifecycle expires in S3 leaves the volume too, so it never outlives retention there.
    assert dra["autoImportPolicy"]["events"] == ["NEW", "CHANGED", "DELETED"]
    rules = fsx_prod.one(
        "aws:s3/bucketLifecycleConfiguration:BucketLifecycleConfiguration", "artifacts-lifecycle"
    ).inputs["rules"]
    (retention,) = [r for r in rules if r["id"] == "checkpoint-retention"]
    assert retention["filter"] == {"prefix": "checkpoints/"} and retention["expiration"] == {"days": 90}
    # A prune leaves noncurrent versions on the versioned bucket: they go a day later, not in 7.
    assert retention["noncurrentVersionExpiration"] == {"noncurrentDays": 1}
