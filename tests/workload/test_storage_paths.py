"""A checkpoint downloaded from S3 lands inside its directory, whatever the keys under its prefix
say: a key that resolves elsewhere (`..`, an absolute path) is refused before anything is written,
so whoever can write a job's prefix cannot write the node's files through a resume; nor through a
file name in the step's metadata, which names what the trainer fetches."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws
from trainer import checkpoint, storage

BUCKET = "ckpt"
PREFIX = "checkpoints/job-a"


@pytest.fixture
def s3(fake_aws):
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.mark.parametrize(
    "evil",
    [
        "step_00000100/../../../outside.txt",
        "../outside.txt",
        "/etc/cron.d/evil",  # prefix + "//etc/..." : an absolute path once the prefix is cut
        ".",
    ],
)
def test_a_key_that_leaves_the_directory_is_refused_before_anything_is_written(s3, tmp_path, evil):
    dest = tmp_path / "node" / "staging"
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/step_00000100/__0_0.distcp", Body=b"shard")
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/{evil}", Body=b"planted")
    with pytest.raises(ValueError) as err:
        storage.download_prefix(BUCKET, PREFIX, dest)
    message = str(err.value)
    assert f"refusing s3://{BUCKET}/{PREFIX}/{evil}" in message
    assert f"outside {dest.resolve()}" in message
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written == []  # not even the good shard: the keys are checked first


def test_keys_inside_the_directory_are_downloaded_and_directory_markers_skipped(s3, tmp_path):
    dest = tmp_path / "staging"
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/step_00000100/__0_0.distcp", Body=b"shard")
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/step_00000100/sub/../.metadata", Body=b"meta")
    s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/step_00000100/", Body=b"")  # pyarrow's create_dir
    storage.download_prefix(BUCKET, PREFIX, dest)
    assert (dest / "step_00000100" / "__0_0.distcp").read_bytes() == b"shard"
    assert (dest / "step_00000100" / ".metadata").read_bytes() == b"meta"
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == [
        "step_00000100/.metadata",
        "step_00000100/__0_0.distcp",
    ]


def test_a_file_the_metadata_names_outside_the_step_is_refused_before_anything_is_written(s3, tmp_path):
    """Through the trainer's own fetch, whose names come from the step's `.metadata` (written by
    whoever can write the prefix): nothing is written, not even the good shard or the marker, so
    the step stays incomplete on the volume."""
    step = f"{PREFIX}/step_00000100"
    s3.put_object(Bucket=BUCKET, Key=f"{step}/__0_0.distcp", Body=b"shard")
    s3.put_object(Bucket=BUCKET, Key=f"{step}/{checkpoint.MARKER}", Body=b'{"step": 100}')
    s3.put_object(Bucket=BUCKET, Key=f"{step}/../../../../escape.py", Body=b"import os")
    root = tmp_path / "checkpoints"
    root.mkdir()
    with pytest.raises(ValueError, match="refusing"):
        checkpoint.fetch_files(
            root, f"s3://{BUCKET}/{PREFIX}", 100, ["__0_0.distcp", "../../../../escape.py"]
        )
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert checkpoint.complete_steps(root) == []


def test_a_checkpoints_files_are_fetched_several_at_once_and_its_marker_last(s3, tmp_path, monkeypatch):
    """A restart's fetch: every file of the step in flight together (before, one after another, the
    node's network idle between files), through one shared client, and the marker only once all of
    them landed, so a fetch cut short leaves the step incomplete on the volume."""
    import threading

    names = [f"__{rank}_0.distcp" for rank in range(4)]
    for name in [*names, checkpoint.MARKER]:
        s3.put_object(Bucket=BUCKET, Key=f"{PREFIX}/step_00000100/{name}", Body=name.encode())
    together = threading.Barrier(len(names), timeout=10)  # passes only with every file in flight at once
    clients, order = set(), []
    real = storage.download_file

    def download(bucket, key, dest, s3_client=None):
        if not key.endswith(checkpoint.MARKER):
            clients.add(id(s3_client))
            together.wait()
        real(bucket, key, dest, s3_client)
        order.append(key.rsplit("/", 1)[-1])

    monkeypatch.setattr(storage, "download_file", download)
    checkpoint.fetch_files(tmp_path, f"s3://{BUCKET}/{PREFIX}", 100, names)
    assert order[-1] == checkpoint.MARKER and sorted(order[:-1]) == names
    assert len(clients) == 1 and None not in clients
    step = checkpoint.step_dir(tmp_path, 100)
    assert sorted(p.name for p in step.iterdir()) == sorted([*names, checkpoint.MARKER])
