"""A PyTorchJob pod the operator keeps recreating without progress ends the job (trainer.recreations,
called by trainer.launch before torchrun). Under `ExitCode` the training operator v1.9.4 recreates
a pod that exited 128 or more without end (its backoffLimit counts container restarts of running
pods, 0 under the pod's `Never`), and fails the job on a code from 1 to 127."""

from __future__ import annotations

import subprocess
import sys

import boto3
import pytest
from moto import mock_aws
from support.paths import WORKLOAD
from trainer import checkpoint, launch, recreations
from trainer.resilience import RECREATIONS_EXIT_CODE

from components.jobs import pods

S3 = "s3://ckpt/checkpoints/job"


def argv(*extra: str) -> list[str]:
    """torchrun's command line as the stack renders it for the default trainer."""
    return ["--nproc-per-node", "1", "-m", "trainer.train", "--model", "tiny", "--steps", "100", *extra]


def complete(bucket, step: int) -> None:
    bucket.put_object(Key=f"checkpoints/job/step_{step:08d}/{checkpoint.MARKER}", Body=b"{}")


@pytest.fixture
def s3(fake_aws, monkeypatch):
    monkeypatch.setenv(recreations.LIMIT_ENV, "2")
    monkeypatch.setenv(recreations.RUN_ENV, "run-a")
    with mock_aws():
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="ckpt")
        yield boto3.resource("s3", region_name="us-east-1").Bucket("ckpt")


def test_the_stack_and_the_launcher_name_the_same_variables():
    assert (pods.RECREATIONS_LIMIT_ENV, pods.RECREATIONS_RUN_ENV) == (
        recreations.LIMIT_ENV,
        recreations.RUN_ENV,
    )


def test_a_pod_recreated_past_the_limit_without_progress_stops(s3):
    args = argv("--s3-checkpoints", S3)
    complete(s3, 50)
    assert recreations.check(args, "job-worker-1") is None  # created: 0 recreations
    assert recreations.check(args, "job-worker-1") is None  # 1
    assert recreations.check(args, "job-worker-1") is None  # 2: the limit
    sentence = recreations.check(args, "job-worker-1")
    assert sentence == (
        "launch: pod job-worker-1 was created 3 times since the job's newest checkpoint (step 50) without "
        "saving a newer one, more than the 2 the stack allows (jobs[].maxRecreations); exiting 5, which "
        f"fails the job. Its logs say why each start ended; delete {S3}/recreations/job-worker-1.json to "
        "let an unchanged job try again."
    )
    assert recreations.check(args, "job-worker-0") is None  # each pod counts its own


def test_progress_or_a_new_run_starts_the_count_again(s3, monkeypatch):
    args = argv("--s3-checkpoints", S3)
    for _ in range(3):
        recreations.check(args, "job-worker-0")
    complete(s3, 100)  # a drain saved a checkpoint before the pod went
    for _ in range(3):
        assert recreations.check(args, "job-worker-0") is None
    monkeypatch.setenv(recreations.RUN_ENV, "run-b")  # a new image or other flags: a new run
    for _ in range(3):
        assert recreations.check(args, "job-worker-0") is None
    assert recreations.check(args, "job-worker-0") is not None


def test_without_s3_the_count_lives_on_the_shared_volume(tmp_path, monkeypatch):
    monkeypatch.setenv(recreations.LIMIT_ENV, "1")
    args = argv("--checkpoint-dir", str(tmp_path))
    assert recreations.check(args, "job-worker-0") is None
    assert recreations.check(args, "job-worker-0") is None
    assert recreations.check(args, "job-worker-0") is not None
    assert (tmp_path / "recreations" / "job-worker-0.json").is_file()


def test_the_launcher_exits_for_good_before_torchrun_once_over(s3, monkeypatch):
    monkeypatch.setenv(recreations.LIMIT_ENV, "0")
    args = argv("--s3-checkpoints", S3)
    assert recreations.check(args) is None  # the first start of this pod
    ran = []
    monkeypatch.setattr(launch.run, "main", lambda a: ran.append(a))
    assert launch.main(args) == RECREATIONS_EXIT_CODE and ran == []
    assert 1 <= RECREATIONS_EXIT_CODE <= 127  # permanent under ExitCode (train_util.go: retryable >= 128)


def test_a_count_that_cannot_be_kept_never_stops_the_job(monkeypatch, capsys):
    monkeypatch.setenv(recreations.LIMIT_ENV, "2")

    def unreachable(*_):
        raise OSError("no route to S3")

    monkeypatch.setattr(recreations, "newest_step", unreachable)
    assert launch.over_recreation_limit(argv("--s3-checkpoints", S3)) is False
    assert "could not count this pod's starts" in capsys.readouterr().err


def test_commands_and_unset_limits_are_not_counted(monkeypatch):
    monkeypatch.setenv(recreations.LIMIT_ENV, "2")
    assert recreations.check(["--nproc-per-node", "1", "train.py"]) is None
    monkeypatch.delenv(recreations.LIMIT_ENV)
    assert recreations.check(argv()) is None


def test_the_launcher_starts_without_importing_torchs_checkpoint_package():
    """The pod's PID 1 counts its starts from the checkpoint layout only: DCP's import (0.6 s of
    CPU) is the workers' cost, not paid once more by every pod start."""
    probe = "import sys, trainer.launch; print('torch.distributed.checkpoint' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=WORKLOAD, capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False"
