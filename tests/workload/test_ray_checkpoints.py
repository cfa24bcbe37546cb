"""How Ray Train gets the trainer's checkpoints: registered where the trainer put them in S3, or
uploaded by Ray in the background, never a second synchronous upload; and how a restarted worker
group finds them. `ray.train`'s worker API is replaced by a recorder: no Ray cluster here."""

from __future__ import annotations

import os
import types

import boto3
import pytest
import ray.train
import torch.distributed as dist
from moto import mock_aws
from ray.train import Checkpoint, CheckpointUploadMode
from trainer import checkpoint, ray_train, storage
from trainer.config import parse_args

FILESYSTEM = object()  # stands for the run's pyarrow filesystem


class Worker:
    """ray.train's worker side for one rank: what it reports, and the run's storage."""

    def __init__(self, monkeypatch, rank: int = 0, restored: Checkpoint | None = None):
        self.reports: list[dict] = []
        self.restored = restored
        context = types.SimpleNamespace(
            get_world_rank=lambda: rank,
            get_world_size=lambda: 1,
            get_local_rank=lambda: 0,
            get_storage=lambda: types.SimpleNamespace(storage_filesystem=FILESYSTEM),
        )
        monkeypatch.setattr(ray.train, "get_context", lambda: context)
        monkeypatch.setattr(ray.train, "get_checkpoint", lambda: self.restored)
        monkeypatch.setattr(ray.train, "report", self.report)

    def report(self, metrics, checkpoint=None, checkpoint_upload_mode=CheckpointUploadMode.SYNC, **kwargs):
        if "checkpoint_step" in metrics:
            self.reports.append(
                {"step": metrics["checkpoint_step"], "checkpoint": checkpoint, "mode": checkpoint_upload_mode}
            )

    def checkpoints(self) -> list[tuple[int, CheckpointUploadMode, str | None]]:
        return [(r["step"], r["mode"], r["checkpoint"] and r["checkpoint"].path) for r in self.reports]


@pytest.fixture
def one_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "0")
    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def s3(fake_aws):
    with mock_aws():
        boto3.client("s3").create_bucket(Bucket="ckpt")
        yield


def test_with_s3_ray_registers_each_mirrored_checkpoint_in_place_once_its_marker_is_there(
    tmp_path, monkeypatch, one_rank, s3
):
    """The trainer's real loop on one rank: saves at 10 and 20 upload in the background, the last
    (30) before the run ends. Ray is handed each S3 step directory as it is (NO_UPLOAD), only once
    S3 holds its marker; nothing is copied or uploaded for Ray."""
    worker = Worker(monkeypatch)
    marker_in_s3 = []

    def report(metrics, checkpoint=None, **kwargs):
        if checkpoint is not None:
            step = metrics["checkpoint_step"]
            marker_in_s3.append(storage.exists("ckpt", f"run/job/step_{step:08d}/COMPLETE"))
        worker.report(metrics, checkpoint, **kwargs)

    monkeypatch.setattr(ray.train, "report", report)
    cfg = parse_args(
        ["--steps", "30", "--checkpoint-every", "10", "--log-every", "10", "--no-compile",
         "--s3-checkpoints", "s3://ckpt/run/job",
         "--checkpoint-dir", str(tmp_path / "ckpt"), "--data-cache", str(tmp_path / "data")]
    )  # fmt: skip
    ray_train.train_loop_per_worker(cfg.to_dict())

    assert worker.checkpoints() == [
        (step, CheckpointUploadMode.NO_UPLOAD, f"ckpt/run/job/step_{step:08d}") for step in (10, 20, 30)
    ]
    assert marker_in_s3 == [True, True, True]
    assert all(r["checkpoint"].filesystem is FILESYSTEM for r in worker.reports)  # the run's own
    keys = sorted(o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket="ckpt")["Contents"])
    assert keys == [
        f"run/job/step_{s:08d}/{n}" for s in (10, 20, 30) for n in (".metadata", "COMPLETE", "__0_0.distcp")
    ]
    assert not (tmp_path / "ckpt" / ray_train.UPLOADS).exists()


def complete_step(root, step: int, ranks: int = 2):
    path = checkpoint.step_dir(root, step)
    path.mkdir(parents=True)
    for name in (checkpoint.METADATA, *(f"__{r}_0.distcp" for r in range(ranks))):
        (path / name).write_bytes(name.encode())
    (path / checkpoint.MARKER).write_text(f'{{"step": {step}}}')
    return path


@pytest.mark.parametrize(
    ("rank", "names"), [(0, [".metadata", "COMPLETE", "__0_0.distcp"]), (1, ["__1_0.distcp"])]
)
def test_without_s3_ray_uploads_each_workers_own_files_in_the_background(tmp_path, monkeypatch, rank, names):
    """Ray's upload (ASYNC) reads hard links of the worker's own files, on the checkpoint volume:
    nothing is copied first, and the training thread does not wait for the upload."""
    root = tmp_path / "ckpt"
    path = complete_step(root, 10)
    worker = Worker(monkeypatch, rank=rank)
    ray_train.RayCheckpoints(rank, root, None).finished(10, path)

    [(step, mode, staged)] = worker.checkpoints()
    assert (step, mode) == (10, CheckpointUploadMode.ASYNC)
    staged = os.path.abspath(staged)
    assert os.path.dirname(staged) == str(root / ray_train.UPLOADS)
    assert sorted(os.listdir(staged)) == names
    for name in names:
        assert os.stat(os.path.join(staged, name)).st_ino == (path / name).stat().st_ino


def test_a_restarted_worker_group_without_s3_resumes_from_rays_checkpoint(tmp_path, monkeypatch):
    """Ray's checkpoint is installed whole onto the (fresh) volume, and links a failure left for an
    upload that never happened are dropped."""
    restored = complete_step(tmp_path / "ray", 20)
    Worker(monkeypatch, restored=Checkpoint.from_directory(str(restored)))
    cfg = parse_args(["--checkpoint-dir", str(tmp_path / "fresh")])
    stale = tmp_path / "fresh" / ray_train.UPLOADS / "step_00000010-rank0-x"
    stale.mkdir(parents=True)
    ray_train.restore(cfg, local_rank=0)
    assert checkpoint.complete_steps(tmp_path / "fresh") == [20]
    assert sorted(p.name for p in (tmp_path / "fresh").iterdir()) == ["step_00000020"]


def test_a_restarted_worker_group_with_s3_leaves_the_resume_to_the_store(tmp_path, monkeypatch):
    """With S3 the store fetches S3's newest complete step itself (one download per node), never
    older than what Ray registered: Ray's checkpoint is not downloaded by every worker."""
    Worker(monkeypatch)
    monkeypatch.setattr(ray.train, "get_checkpoint", lambda: pytest.fail("Ray's checkpoint was read"))
    cfg = parse_args(["--checkpoint-dir", str(tmp_path / "ckpt"), "--s3-checkpoints", "s3://ckpt/run/job"])
    ray_train.restore(cfg, local_rank=0)
    assert not (tmp_path / "ckpt").exists()


def test_ray_sets_up_the_training_group_with_the_collective_timeout():
    trainer = ray_train.build_trainer(["--collective-timeout", "42", "--use-gpu"])
    assert trainer.backend_config.timeout_s == 42
    assert trainer.backend_config.backend == "nccl"
    assert ray_train.build_trainer([]).backend_config.timeout_s == 300  # the trainer's default


def test_with_s3_the_ray_run_is_the_checkpoints_prefix(monkeypatch):
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    run = ray_train.build_trainer(["--s3-checkpoints", "s3://ckpt/checkpoints/job"]).run_config
    assert (run.storage_path, run.name) == ("ckpt/checkpoints", "job")
    assert run.storage_filesystem.type_name == "py::without-directories+s3"
    assert run.checkpoint_config.num_to_keep is None  # S3 copies are the lifecycle rule's to expire
    local = ray_train.build_trainer(["--keep-checkpoints", "2", "--storage-path", "/runs"]).run_config
    assert (local.storage_path, local.name, local.checkpoint_config.num_to_keep) == (
        "/runs",
        "trainstack-tiny",
        2,
    )
    with pytest.raises(SystemExit):
        ray_train.build_trainer(
            ["--s3-checkpoints", "s3://ckpt/job", "--storage-path", "s3://ckpt/elsewhere"]
        )


def test_ray_never_creates_directories_in_the_bucket(tmp_path):
    """A job's role may write only its own prefix: Arrow's S3 CreateDir would HeadBucket and write
    marker objects for every parent prefix, so Ray's run directory is not created; everything else
    reaches the store."""
    import pyarrow.fs

    inner = pyarrow.fs.LocalFileSystem()
    fs = pyarrow.fs.PyFileSystem(ray_train.WithoutDirectories(inner))
    run = tmp_path / "checkpoints" / "job"
    fs.create_dir(str(run))
    assert not (tmp_path / "checkpoints").exists()
    run.mkdir(parents=True)  # what S3 has without asking: a key's prefix
    with fs.open_output_stream(str(run / ".validate_storage_marker")) as out:
        out.write(b"")
    assert fs.get_file_info(str(run / ".validate_storage_marker")).type == pyarrow.fs.FileType.File
    assert [i.base_name for i in fs.get_file_info(pyarrow.fs.FileSelector(str(run)))] == [
        ".validate_storage_marker"
    ]
