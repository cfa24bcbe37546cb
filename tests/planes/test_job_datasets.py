"""A job that names a declared dataset trains on the files the stack prepares, after they are
prepared; a wrong name, or data flags of its own beside it, is a config error naming the job."""

from __future__ import annotations

from support.config_rules import config_problems
from support.jobs import PYTORCHJOB, body
from support.plans import plan

C4 = {"name": "c4-en", "source": "allenai/c4", "config": "en", "maxTokens": 2_000_000, "valTokens": 20_000}
JOB = {"name": "fsdp", "kind": "PyTorchJob", "nodeGroup": "gpu", "dataset": "c4-en"}


def test_a_job_naming_a_dataset_gets_its_files_and_waits_for_their_preparation():
    run = plan("dev", datasets=[C4], jobs=[JOB])
    (prep,) = [j for j in run.by_type("kubernetes:batch/v1:Job") if j.name.startswith("dataset-")]
    out = next(
        a for a in prep.inputs["spec"]["template"]["spec"]["containers"][0]["args"] if a.startswith("s3://")
    )
    (job,) = [r for r in run.by_type(PYTORCHJOB) if r.name == "job-fsdp"]
    (container,) = body(job)["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--data") + 1] == f"{out}train.bin"
    assert args[args.index("--val-data") + 1] == f"{out}val.bin"
    assert prep.urn in job.dependencies  # pulumi-kubernetes awaits the Job's Complete first


def test_a_dataset_the_stack_does_not_declare_is_refused():
    (found,) = config_problems(datasets=[C4], jobs=[{**JOB, "dataset": "c4"}])
    assert found == 'trainstack:jobs[0].dataset = "c4": no dataset of that name; allowed: c4-en'


def test_data_flags_beside_a_dataset_are_refused():
    found, mount = config_problems(datasets=[C4], jobs=[{**JOB, "args": ["--data", "/datasets/x.bin"]}])
    assert found.startswith('trainstack:jobs[0].args = "--data": dataset c4-en gives the job --data')
    # And the path itself: nothing is mounted at /datasets in the dev stack (issue #47).
    assert mount.startswith('trainstack:jobs[0].args = "/datasets/x.bin": job ')


def test_a_ray_jobs_own_auth_variables_are_refused():
    ray = {"name": "ray", "kind": "RayJob", "nodeGroup": "gpu", "env": {"RAY_AUTH_MODE": "disabled"}}
    (found,) = config_problems(jobs=[ray])
    assert found.startswith('trainstack:jobs[0].env.RAY_AUTH_MODE = "(set)": KubeRay sets it')


def test_the_plan_prints_each_datasets_size_and_time(tmp_path):
    from support.plans import stack_values

    from config import parse_config
    from offline.training_lines import dataset_lines

    big = {**C4, "maxTokens": 3_000_000_000, "valTokens": 0}
    cfg = parse_config("dev", stack_values("dev", datasets=[big], jobs=[JOB]))
    assert dataset_lines(cfg) == [
        "Datasets (prepared once into the bucket by a Job; time at an assumed 1M tokens/s):",
        # 3e9 tokens x 2 bytes (uint16 ids); 3e9 tokens at 1M/s is 50 min.
        f"  {'c4-en':30s} allenai/c4/en train: 3,000,000,000 tokens, ~6.0 GB, ~50 min; read by fsdp",
    ]
