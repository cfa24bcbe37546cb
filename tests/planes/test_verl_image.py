"""The VERL image: the same build context's `verl` target, built by the stack's own pipeline next to
the training image and pushed to the stack's registry by digest (components/image.py), so VERL
jobs install nothing when they start. Run as a small program of the build components under the
mock engine, with CodeBuild and with the local Docker."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from support.paths import ROOT

from components.image import context_archive, docker_build, image_tag
from components.jobs.verl import VERL_IMAGE
from config.build import DEFAULT_BASE_IMAGE
from offline.engine import run_program

TRIGGER = "pulumi-python:dynamic:Resource"
CACHE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack-t-image-dockerhub/"


def build_program(tmp_path, builder: str, verl: bool, docker_hub: bool = False) -> Path:
    program = tmp_path / "program.py"
    program.write_text(
        textwrap.dedent(f"""
            from pathlib import Path

            import pulumi

            from components.bucket import ArtifactBucket, ArtifactBucketArgs
            from components.image import ImageBuild, ImageBuildArgs
            from components.registry import ImageRegistry, ImageRegistryArgs

            image = ImageBuild(
                "image",
                ImageBuildArgs(
                    context_dir=Path({str(ROOT / "workload")!r}),
                    base_image={DEFAULT_BASE_IMAGE!r},
                    builder={builder!r},
                    compute_type="BUILD_GENERAL1_LARGE",
                    build_timeout_minutes=60,
                    nightly_rebuild=False,
                    source_repository=None,
                    docker_hub_username={"ci" if docker_hub else None!r},
                    docker_hub_access_token={"dckr_pat_offline" if docker_hub else None!r},
                    bucket=ArtifactBucket("artifacts", ArtifactBucketArgs("SSE-S3", 30, 14, False)),
                    registry=ImageRegistry("training", ImageRegistryArgs(7, 30, True, False)),
                    region="us-east-1",
                    account_id="123456789012",
                    aws_profile=None,
                    archive_dir=Path({str(tmp_path / "contexts")!r}),
                    verl_base_image={VERL_IMAGE if verl else None!r},
                ),
            )
            pulumi.export("imageUri", image.image_uri)
            pulumi.export("verlImageUri", image.verl_image_uri)
        """)
    )
    return program


def run(tmp_path, builder: str = "codebuild", verl: bool = True, docker_hub: bool = False):
    program = build_program(tmp_path, builder, verl, docker_hub)
    return run_program("t", {"aws:region": "us-east-1"}, program=program)


def project_env(run) -> dict[str, str]:
    project = run.one("aws:codebuild/project:Project")
    return {v["name"]: v["value"] for v in project.inputs["environment"]["environmentVariables"]}


def test_codebuild_builds_the_verl_target_next_to_the_training_image(tmp_path):
    done = run(tmp_path)
    archive = context_archive(ROOT / "workload")
    triggers = {t.name: t.inputs for t in done.by_type(TRIGGER)}
    assert set(triggers) == {"image-build", "image-verl-build"}
    training, verl = triggers["image-build"], triggers["image-verl-build"]
    assert (training["target"], verl["target"]) == ("training", "verl")
    assert training["image_tag"] == image_tag(archive, DEFAULT_BASE_IMAGE)
    assert verl["image_tag"] == image_tag(archive, VERL_IMAGE, "verl") != training["image_tag"]
    # One project and one uploaded context serve both; the project hands the build the VERL base.
    assert verl["source_location"] == training["source_location"]
    assert project_env(done)["VERL_BASE_IMAGE"] == VERL_IMAGE
    # Both pushed to the stack's repository, each run by its digest.
    repo = done.outputs["imageUri"].split("@")[0]
    assert done.outputs["verlImageUri"].startswith(repo + "@sha256:")
    assert done.outputs["verlImageUri"] != done.outputs["imageUri"]


def test_no_verl_image_without_a_verl_base(tmp_path):
    done = run(tmp_path, verl=False)
    assert [t.name for t in done.by_type(TRIGGER)] == ["image-build"]
    assert "VERL_BASE_IMAGE" not in project_env(done)
    assert done.outputs.get("verlImageUri") is None


def test_the_verl_base_comes_through_the_docker_hub_cache_like_the_training_base(tmp_path):
    env = project_env(run(tmp_path, docker_hub=True))
    assert env["BASE_IMAGE"] == CACHE + "nvidia/cuda:" + DEFAULT_BASE_IMAGE.split(":", 1)[1]
    assert env["VERL_BASE_IMAGE"] == CACHE + VERL_IMAGE


def test_the_buildspec_builds_and_checks_the_target_it_is_given():
    buildspec = (ROOT / "components" / "buildspec.yml").read_text()
    assert 'export TARGET="${TARGET:-training}"' in buildspec  # scheduled and webhook builds: training
    assert '--target "$TARGET"' in buildspec
    assert '${VERL_BASE_IMAGE:+--build-arg VERL_BASE_IMAGE="$VERL_BASE_IMAGE"}' in buildspec
    assert "SMOKE_TEST=/opt/trainstack/smoke_test_verl.py" in buildspec


@pytest.mark.parametrize("target", ["training", "verl"])
def test_the_local_docker_builds_each_target_from_its_base(tmp_path, target):
    done = run(tmp_path, builder="docker")
    images = {i.name: i.inputs for i in done.by_type("docker:index/image:Image")}
    name = "image" if target == "training" else "image-verl"
    base = DEFAULT_BASE_IMAGE if target == "training" else VERL_IMAGE
    assert images[name]["build"] == json.loads(json.dumps(docker_build(ROOT / "workload", base, target)))
    assert images[name]["build"]["target"] == target
    assert images[name]["imageName"].endswith(
        ":" + image_tag(context_archive(ROOT / "workload"), base, target)
    )
