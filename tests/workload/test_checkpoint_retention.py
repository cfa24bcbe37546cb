"""What the trainer keeps of its checkpoints, on its volume and in S3 (storage.checkpointsKept and
checkpointKeepEvery, passed as --keep-checkpoints and --keep-every): the newest N complete ones
and every multiple of M. Before, S3 kept every save until the bucket's lifecycle expired it: a
2,000-step run saving every 50 steps left 40 checkpoints there."""

from __future__ import annotations

import itertools

import boto3
import torch
from moto import mock_aws
from trainer import checkpoint

from domain import retention

BUCKET, PREFIX = "ckpt", "checkpoints/job"


def s3_steps(s3) -> dict[int, set[str]]:
    """Each step directory's file names as S3 lists them now (current versions)."""
    found: dict[int, set[str]] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}/"):
        for o in page.get("Contents", []):
            step_name, name = o["Key"].removeprefix(f"{PREFIX}/").split("/", 1)
            found.setdefault(int(step_name.removeprefix("step_")), set()).add(name)
    return found


def test_the_newest_and_every_mth_checkpoint_stay_in_s3_and_on_the_volume(tmp_path, control, fake_aws):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.AdamW(model.parameters())
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        # An upload a fault cut short before this run: shards and no marker.
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/step_00000005/__0_0.distcp", Body=b"torn")
        root = tmp_path / "ckpt"
        store = checkpoint.CheckpointStore(root, control, f"s3://{BUCKET}/{PREFIX}", keep=2, keep_every=30)
        for at in range(10, 70, 10):
            model(torch.randn(2, 8)).sum().backward()
            optimizer.step()
            store.save(at, model, optimizer).finish()
        store.close()

        kept = s3_steps(s3)
        assert sorted(kept) == [30, 50, 60]  # 60 and 50 the newest, 30 a multiple of 30
        assert all(checkpoint.MARKER in names and checkpoint.METADATA in names for names in kept.values())
        assert checkpoint.complete_steps(root) == [30, 50, 60]
        # Versioned: the pruned ones are delete markers over noncurrent versions, which the
        # bucket's lifecycle removes a day later.
        markers = s3.list_object_versions(Bucket=BUCKET, Prefix=f"{PREFIX}/step_00000010/")["DeleteMarkers"]
        assert markers and all(m["IsLatest"] for m in markers)


def test_the_trainers_rule_is_the_plans():
    """The plan counts what S3 keeps with domain.retention (the domain cannot import the image)."""
    steps = [10, 20, 25, 30, 40, 50, 60, 100]
    for keep, every in itertools.product((1, 2, 3, 8), (0, 1, 10, 20, 25, 1000)):
        assert checkpoint.retained(steps, keep, every) == retention.retained(steps, keep, every)


def test_a_step_saved_again_loses_its_s3_marker_before_any_new_file_goes_up(tmp_path, control, fake_aws):
    """A resumed run saves again a step S3 already has complete: S3's marker is removed before the
    new files are uploaded, so a fault mid-upload leaves a torn step there (skipped on resume),
    never a `COMPLETE` one whose shards come from two saves."""
    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.AdamW(model.parameters())
    marker = f"{PREFIX}/step_00000010/{checkpoint.MARKER}"
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        store = checkpoint.CheckpointStore(tmp_path / "ckpt", control, f"s3://{BUCKET}/{PREFIX}")
        store.save(10, model, optimizer).finish()
        assert checkpoint.s3_complete_steps(f"s3://{BUCKET}/{PREFIX}") == [10]
        uploads = []
        real_upload = checkpoint.storage.upload_file

        def upload(path, bucket, key):  # what S3 holds at the first of the new save's uploads
            uploads.append((key, checkpoint.storage.exists(bucket, marker)))
            real_upload(path, bucket, key)

        checkpoint.storage.upload_file = upload
        try:
            model(torch.randn(2, 8)).sum().backward()
            optimizer.step()
            store.save(10, model, optimizer).finish()
        finally:
            checkpoint.storage.upload_file = real_upload
        store.close()
        assert uploads and uploads[0][1] is False, uploads
        assert uploads[-1][0] == marker  # the marker goes up last, again
        assert checkpoint.s3_complete_steps(f"s3://{BUCKET}/{PREFIX}") == [10]
