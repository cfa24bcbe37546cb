"""Flight-recorder dumps on the checkpoint volume, uploaded to S3 by the restarted trainer."""

from __future__ import annotations

import os

import boto3
import pytest
import torch
from moto import mock_aws
from trainer import debug_dumps
from trainer.config import parse_args
from trainer.distributed import DistContext
from trainer.train import train

S3 = "s3://ckpt/checkpoints/job/"


@pytest.fixture
def dumps(tmp_path, monkeypatch, fake_aws):
    """Two ranks' dumps where the stack points TORCH_FR_DUMP_TEMP_FILE, and an S3 bucket."""
    directory = tmp_path / "checkpoints" / "flight-recorder"
    monkeypatch.setenv(debug_dumps.DUMP_PREFIX_ENV, str(directory / "nccl_trace_rank_"))
    with mock_aws():
        boto3.client("s3").create_bucket(Bucket="ckpt")
        yield directory


def s3_objects() -> dict[str, bytes]:
    s3 = boto3.client("s3")
    found = s3.list_objects_v2(Bucket="ckpt").get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket="ckpt", Key=o["Key"])["Body"].read() for o in found}


def test_a_nodes_dumps_go_to_s3_beside_the_checkpoints(dumps, capsys):
    dumps.mkdir(parents=True)
    for rank in (0, 1):
        (dumps / f"nccl_trace_rank_{rank}").write_bytes(f"trace {rank}".encode())
        os.utime(dumps / f"nccl_trace_rank_{rank}", (1_700_000_000, 1_700_000_000))
    (dumps / "unrelated").write_text("not a dump")

    keys = debug_dumps.upload_dumps(S3, local_rank=0)

    folder = "checkpoints/job/flight-recorder"
    assert keys == [f"{folder}/1700000000-nccl_trace_rank_0", f"{folder}/1700000000-nccl_trace_rank_1"]
    assert s3_objects() == {keys[0]: b"trace 0", keys[1]: b"trace 1"}
    assert sorted(p.name for p in dumps.iterdir()) == ["unrelated"]  # uploaded once, not at every start
    err = capsys.readouterr().err
    assert f"flight recorder: uploaded {dumps / 'nccl_trace_rank_1'} to s3://ckpt/{keys[1]}" in err


def test_only_local_rank_0_uploads_and_every_rank_makes_the_directory(dumps):
    """torch opens the dump file in that directory but does not create it."""
    assert debug_dumps.upload_dumps(S3, local_rank=1) == []
    assert dumps.is_dir()
    (dumps / "nccl_trace_rank_1").write_bytes(b"trace")
    assert debug_dumps.upload_dumps(S3, local_rank=1) == [] and s3_objects() == {}
    assert debug_dumps.upload_dumps("", local_rank=0) == []  # no S3 mirror: they stay on the volume
    assert (dumps / "nccl_trace_rank_1").exists()


def test_the_trainer_uploads_them_before_anything_else(dumps, monkeypatch):
    """At the start of every run, before the node check and the loop: a restart after an NCCL
    timeout uploads what the timed-out ranks left."""
    dumps.mkdir(parents=True)
    (dumps / "nccl_trace_rank_0").write_bytes(b"trace")
    os.utime(dumps / "nccl_trace_rank_0", (1_700_000_000, 1_700_000_000))

    class Started(Exception):
        pass

    def started(*args, **kwargs):
        raise Started

    monkeypatch.setattr("trainer.train.Loop", started)
    with pytest.raises(Started):
        train(parse_args(["--s3-checkpoints", S3]), DistContext(0, 1, 0, torch.device("cpu")))
    assert s3_objects() == {"checkpoints/job/flight-recorder/1700000000-nccl_trace_rank_0": b"trace"}


def test_the_launcher_uploads_them_on_its_way_out(dumps, monkeypatch):
    """A TrainJob's restart replaces the whole pod, and with it the volume the dumps were written to,
    before any restarted trainer could find them: the launcher (the pod's PID 1, trainer.launch)
    uploads what its failed workers left as it exits, and still exits as torchrun's failure says."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    from trainer import launch

    def workers_fail(argv):
        dumps.mkdir(parents=True, exist_ok=True)
        dump = dumps / "nccl_trace_rank_1"
        dump.write_bytes(b"the last collectives")  # what the NCCL watchdog writes on its timeout
        os.utime(dump, (1_700_000_000, 1_700_000_000))
        failure = ProcessFailure(local_rank=1, pid=42, exitcode=1, error_file="")
        raise ChildFailedError("trainer.train", {1: failure})

    monkeypatch.setattr(launch.run, "main", workers_fail)
    with pytest.raises(ChildFailedError):  # exits 1, as torchrun would: the pod is recreated
        launch.main(["--nproc-per-node", "2", "-m", "trainer.train", "--s3-checkpoints", S3])
    assert s3_objects() == {
        "checkpoints/job/flight-recorder/1700000000-nccl_trace_rank_1": b"the last collectives"
    }


def test_the_launcher_exits_as_before_when_the_upload_cannot_be_made(dumps, monkeypatch, capsys):
    from trainer import launch

    monkeypatch.setattr(launch.run, "main", lambda argv: None)
    monkeypatch.setattr(debug_dumps, "upload_dumps", lambda *a, **k: (_ for _ in ()).throw(OSError("no S3")))
    assert launch.main(["-m", "trainer.train", "--s3-checkpoints", S3]) == 0
    assert (
        "launch: could not upload the flight recorder's dumps (OSError('no S3'))" in capsys.readouterr().err
    )
