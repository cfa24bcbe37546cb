"""What a job reads must exist or be made (issue #47), checked before anything is registered: the
files under the datasets mount, the script or module its command runs, and the bring-your-own
Dockerfile's stage and smoke test that the image build (components/buildspec.yml) needs."""

from __future__ import annotations

import json
import shutil

import boto3
import pytest
from moto import mock_aws
from support.config_rules import BASE, group, job, problems
from support.paths import ROOT

from config import parse_config
from config.job_inputs import mount_warnings, stages
from planes.datasets import missing_mounted_files

C4 = {"name": "c4-en", "maxTokens": 1000000, "valTokens": 10000}
README_JOB = job(name="llama-1b-c4", args=["--batch-size", "4", "--data", "/datasets/c4-en/train.bin"])


def config(**overrides):
    values = dict(BASE)
    for key, value in overrides.items():
        values[f"trainstack:{key}"] = value if isinstance(value, str) else json.dumps(value)
    return parse_config("dev", values)


def test_the_readmes_old_snippet_reads_a_file_nothing_makes_or_mounts():
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[README_JOB])
    assert msg == (
        "trainstack:jobs[0].args = \"/datasets/c4-en/train.bin\": job 'llama-1b-c4' reads "
        "/datasets/c4-en/train.bin, and nothing is mounted at /datasets (storage.datasetsMount is false); "
        "allowed: declare the dataset under datasets and set jobs[0].dataset, or storage.datasetsMount: "
        "true with the files in the bucket's datasets/"
    )


def test_a_declared_datasets_files_are_given_by_naming_it():
    (msg,) = problems(
        gpuNodeGroups=[group()], jobs=[README_JOB], datasets=[C4], storage={"datasetsMount": True}
    )
    assert msg.startswith(
        'trainstack:jobs[0].args = "/datasets/c4-en/train.bin": dataset c4-en writes /datasets/c4-en/'
    )
    assert msg.endswith("allowed: dataset: c4-en (it gives the job --data and --val-data)")


def test_a_file_no_dataset_makes_is_left_to_preview_and_the_plan_says_so():
    other = job(name="ft", args=["--data=/datasets/mine/train.bin"])
    cfg = config(gpuNodeGroups=[group()], jobs=[other], storage={"datasetsMount": True})
    assert mount_warnings(cfg.jobs, cfg.datasets) == [
        "WARNING: trainstack:jobs[0]: reads /datasets/mine/train.bin, which no declared dataset makes; "
        "`pulumi preview` checks that the bucket holds datasets/mine/train.bin"
    ]


def test_the_files_a_declared_dataset_makes_need_no_check():
    cfg = config(gpuNodeGroups=[group()], jobs=[job()], datasets=[C4], storage={"datasetsMount": True})
    (d,) = cfg.datasets
    made = job(args=["--data", f"/datasets/{d.spec.directory}train.bin"])
    cfg = config(gpuNodeGroups=[group()], jobs=[made], datasets=[C4], storage={"datasetsMount": True})
    assert mount_warnings(cfg.jobs, cfg.datasets) == []


@mock_aws
def test_preview_stops_on_a_file_the_bucket_does_not_hold(fake_aws):
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="stack-bucket")
    s3.put_object(Bucket="stack-bucket", Key="datasets/mine/train.bin", Body=b"\0\0")
    paths = [
        ("trainstack:jobs[0]", "/datasets/mine/train.bin"),
        ("trainstack:jobs[1]", "/datasets/mine/val.bin"),
    ]
    assert missing_mounted_files(s3, "stack-bucket", paths) == [
        "trainstack:jobs[1]: reads /datasets/mine/val.bin, and s3://stack-bucket/datasets/mine/val.bin does "
        "not exist; upload it there, or declare the dataset under datasets and name it in the job's `dataset`"
    ]


BYO = {"context": "examples/byo"}


@pytest.mark.parametrize(
    "command",
    [["torchrun", "/opt/byo/train.py"], ["torchrun", "train.py"], ["python3", "-m", "torch.distributed.run"]],
)
def test_a_command_the_image_holds_or_the_context_does_not_decide_is_taken(command):
    """An absolute path in the WORKDIR, a relative one, or a module of an installed package."""
    assert config(image=BYO, gpuNodeGroups=[group()], jobs=[job(command=command)]).jobs[0].command == tuple(
        command
    )


def test_a_script_the_image_does_not_hold_is_refused_naming_the_job_and_the_path():
    (msg,) = problems(
        image=BYO, gpuNodeGroups=[group()], jobs=[job(command=["torchrun", "/opt/byo/trian.py"])]
    )
    assert msg == (
        'trainstack:jobs[0].command = ["torchrun", "/opt/byo/trian.py"]: job \'train\' runs script '
        "/opt/byo/trian.py, which the image does not hold: the `training` stage of examples/byo/Dockerfile "
        "copies no such file from examples/byo (its WORKDIR is /opt/byo); allowed: a path the image holds (a "
        "file of examples/byo as the Dockerfile copies it), or your own Dockerfile that copies the script "
        "in: set image.context to its folder"
    )


@pytest.mark.parametrize(
    "path", ["/opt/app/train.py", "train.py", "/opt/trainstack/train.py", "scripts/run.sh"]
)
def test_a_script_outside_what_the_default_image_copies_is_refused_whatever_its_path_form(path):
    """The default image copies trainer/ and smoke_test.py into /opt/trainstack: a script anywhere
    else, absolute or relative, is not in it, and the fix is an image of your own (image.context)."""
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(command=["python", path])])
    assert f"runs script {path}, which the image does not hold" in msg
    assert "set image.context to its folder" in msg


def test_a_script_the_default_image_copies_is_in_it_by_either_path():
    for path in ("/opt/trainstack/trainer/train.py", "trainer/train.py", "smoke_test.py"):
        config(gpuNodeGroups=[group()], jobs=[job(command=["python", path])])


def test_a_module_of_the_default_image_must_be_in_it():
    (msg,) = problems(gpuNodeGroups=[group()], jobs=[job(command=["python", "-m", "trainer.trian"])])
    assert "job 'train' runs module trainer.trian, which the image does not hold" in msg
    config(gpuNodeGroups=[group()], jobs=[job(command=["python", "-m", "trainer.train"])])


def byo_copy(tmp_path, dockerfile: str | None = None):
    target = tmp_path / "my-training-code"
    shutil.copytree(ROOT / "examples" / "byo", target)
    if dockerfile is not None:
        (target / "Dockerfile").write_text(dockerfile)
    return str(target)


def test_your_code_may_live_in_its_own_repository(tmp_path):
    context = byo_copy(tmp_path)
    cfg = config(
        image={"context": context},
        gpuNodeGroups=[group()],
        jobs=[job(command=["torchrun", "/opt/byo/train.py"])],
    )
    assert cfg.image.context == context
    (msg,) = problems(
        image={"context": context, "sourceRepository": "https://github.com/me/infra"}, gpuNodeGroups=[group()]
    )
    assert "image.sourceRepository builds from this repository, and the context is outside it" in msg


def test_a_dockerfile_without_the_training_stage_is_refused(tmp_path):
    context = byo_copy(tmp_path, "FROM python:3.12 AS train\nWORKDIR /app\nCOPY . .\n")
    (msg,) = problems(image={"context": context}, gpuNodeGroups=[group()])
    assert msg == (
        f'trainstack:image.context = "{context}": its Dockerfile has no stage `training`, which the build '
        "targets (--target training); allowed: a stage `FROM ${BASE_IMAGE} AS training`"
    )


def test_a_training_stage_without_the_smoke_test_is_refused(tmp_path):
    context = byo_copy(tmp_path, "FROM python:3.12 AS training\nWORKDIR /app\nCOPY train.py ./\n")
    (msg,) = problems(image={"context": context}, gpuNodeGroups=[group()])
    assert "the build runs `python3 smoke_test.py` in the image's working directory" in msg
    assert msg.endswith("allowed: a smoke_test.py in the context, copied into the stage's WORKDIR (/app)")


def test_stages_read_as_buildkit_names_them():
    found = stages(
        "ARG B=x\nFROM ${B} As Training\nWORKDIR /opt\nWORKDIR app\nCOPY --from=x /a /b\nCOPY a \\\n  b ./\n"
    )
    assert found["training"].workdir == "/opt/app"
    assert found["training"].copied == ("a", "b")
