"""What a job reads must exist or be made, checked before anything is registered: the build context
the image is made from (a Dockerfile with the stage and the smoke test the build runs), the script or
module a job's `command` runs (in that context), and the files it reads under the datasets mount
(made by a declared dataset, or already in the bucket, which `pulumi preview` checks).

The image build (components/buildspec.yml, components/image.py) runs `docker build --target
training` (`verl` for the VERL image) on the context, then `python3 smoke_test.py` in the built
image's working directory: a Dockerfile without that stage, or an image without that file, fails
after the build has been paid for."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from config.datasets import DatasetConfig
from config.jobs import JobConfig
from config.names import PROJECT, PROJECT_ROOT
from config.node_groups import GpuNodeGroupConfig
from config.schema import Reader
from conventions import DATASETS_MOUNT
from domain.datasets import TRAIN_FILE, VAL_FILE
from domain.job_kinds import KINDS

TRAINING_STAGE = "training"
SMOKE_TEST = "smoke_test.py"
_FROM = re.compile(r"^\s*FROM\s+\S+(?:\s+AS\s+(\S+))?\s*$", re.IGNORECASE)
_WORKDIR = re.compile(r"^\s*WORKDIR\s+(\S+)\s*$", re.IGNORECASE)
_COPY = re.compile(r"^\s*(?:COPY|ADD)\s+(.*)$", re.IGNORECASE)
_SCRIPT = re.compile(r"\.(py|sh)$")
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def context_dir(context: str) -> Path:
    """The build context: a path relative to the project, or absolute (your code's own repository)."""
    return PROJECT_ROOT / context


def context_ok(context: str) -> bool:
    """A directory holding a Dockerfile (checked without letting an odd path, too long for the OS
    or with a NUL, raise)."""
    if not context or len(context) > 4096 or "\0" in context:
        return False
    try:
        return (context_dir(context) / "Dockerfile").is_file()
    except (OSError, ValueError):
        return False


@dataclass(frozen=True)
class Copy:
    """One COPY or ADD from the context: its sources, and its destination as an absolute path
    (a relative one is under the WORKDIR of its line) with whether it names a directory."""

    sources: tuple[str, ...]
    destination: str
    into_directory: bool  # a trailing /, or several sources: each lands inside it


@dataclass(frozen=True)
class Stage:
    """One stage of a Dockerfile: its working directory at the end, and what it copies in."""

    workdir: str
    copies: tuple[Copy, ...]  # its COPY and ADD lines from the context (--from=... ones left out)

    @property
    def copied(self) -> tuple[str, ...]:
        return tuple(src for c in self.copies for src in c.sources)


def stages(dockerfile: str) -> dict[str, Stage]:
    """Named stages, as BuildKit reads FROM ... AS <name> (names are case-insensitive)."""
    found: dict[str, Stage] = {}
    name, workdir, copies = None, "/", []
    for line in dockerfile.replace("\\\n", " ").splitlines():
        start = _FROM.match(line)
        if start:
            if name:
                found[name] = Stage(workdir, tuple(copies))
            name, workdir, copies = (start.group(1) or "").lower() or None, "/", []
        elif (wd := _WORKDIR.match(line)) is not None:
            workdir = str(PurePosixPath(workdir) / wd.group(1))
        elif (cp := _COPY.match(line)) is not None:
            words = [w for w in cp.group(1).split() if not w.startswith("--")]
            if "--from=" not in cp.group(1) and len(words) >= 2:
                *sources, dest = words
                into = dest.endswith("/") or dest in (".", "./") or len(sources) > 1
                copies.append(Copy(tuple(sources), str(PurePosixPath(workdir) / dest), into))
    if name:
        found[name] = Stage(workdir, tuple(copies))
    return found


def check_build_context(context: str, source_repository: str | None, r: Reader) -> None:
    """The context holds a Dockerfile with the stage the build targets, and its image holds the
    smoke test the build runs in its working directory."""
    key = f"{PROJECT}:image.context"
    if not context_ok(context):
        r.problem(key, context, "no Dockerfile in that directory", "a directory holding a Dockerfile")
        return
    path = context_dir(context).resolve()
    if source_repository is not None and not path.is_relative_to(PROJECT_ROOT):
        r.problem(
            key,
            context,
            "image.sourceRepository builds from this repository, and the context is outside it",
            "a directory of this project, or no sourceRepository",
        )
    stage = stages((path / "Dockerfile").read_text(errors="replace")).get(TRAINING_STAGE)
    if stage is None:
        r.problem(
            key,
            context,
            f"its Dockerfile has no stage `{TRAINING_STAGE}`, which the build targets (--target {TRAINING_STAGE})",
            f"a stage `FROM ${{BASE_IMAGE}} AS {TRAINING_STAGE}`",
        )
    elif not (path / SMOKE_TEST).is_file() or not any(src in (".", "./", SMOKE_TEST) for src in stage.copied):
        r.problem(
            key,
            context,
            f"the build runs `python3 {SMOKE_TEST}` in the image's working directory, and the "
            f"`{TRAINING_STAGE}` stage does not copy {SMOKE_TEST} from the context",
            f"a {SMOKE_TEST} in the context, copied into the stage's WORKDIR ({stage.workdir})",
        )


def _in_context(root: Path, stage: Stage, path: str) -> bool:
    """Whether the training stage copies `path` (relative: to its WORKDIR) from the context: under
    a COPY's destination, from the file or folder its source names there."""
    target = PurePosixPath(stage.workdir) / path
    for copy in stage.copies:
        dest = PurePosixPath(copy.destination)
        for source in copy.sources:
            src = root / source
            if src.is_dir():  # its contents land in the destination
                if target.is_relative_to(dest) and (src / target.relative_to(dest)).is_file():
                    return True
            elif src.is_file() and target == (dest / src.name if copy.into_directory else dest):
                return True
    return False


def _module_in_context(root: Path, module: str) -> bool | None:
    """Whether `python -m module` finds it in the context; None when its top package is not the
    context's (an installed package, such as torch.distributed.run)."""
    parts = module.split(".")
    if not (root / parts[0]).is_dir() and not (root / f"{parts[0]}.py").is_file():
        return None
    base = root.joinpath(*parts)
    return (
        base.with_suffix(".py").is_file()
        or (base / "__init__.py").is_file()
        or (base / "__main__.py").is_file()
    )


def check_job_command(j: JobConfig, context: str, k: str, r: Reader) -> None:
    """The script or module the job's `command` runs is in the image it runs: the stack's image,
    built from `context` (a job naming its own image is its owner's to check)."""
    if not j.command or j.image is not None or j.verl is not None or not context_ok(context):
        return
    root = context_dir(context).resolve()
    stage = stages((root / "Dockerfile").read_text(errors="replace")).get(TRAINING_STAGE)
    if stage is None:  # check_build_context says so
        return
    workdir = stage.workdir
    words = list(j.command)
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words) and _MODULE.fullmatch(words[i + 1]):
            found, what = _module_in_context(root, words[i + 1]), f"module {words[i + 1]}"
        elif _SCRIPT.search(word) and not word.startswith("-"):
            found, what = _in_context(root, stage, word), f"script {word}"
        else:
            continue
        if found is False:
            r.problem(
                f"{k}.command",
                list(j.command),
                f"job '{j.name}' runs {what}, which the image does not hold: the `{TRAINING_STAGE}` stage "
                f"of {context}/Dockerfile copies no such file from {context} (its WORKDIR is {workdir})",
                f"a path the image holds (a file of {context} as the Dockerfile copies it), or your own "
                "Dockerfile that copies the script in: set image.context to its folder",
            )


def made_by_dataset(path: str, datasets: tuple[DatasetConfig, ...]) -> bool:
    return any(path in {dataset_file(d, TRAIN_FILE), dataset_file(d, VAL_FILE)} for d in datasets)


def dataset_file(d: DatasetConfig, name: str) -> str:
    return f"{DATASETS_MOUNT}/{d.spec.directory}{name}"


def mount_paths(j: JobConfig) -> list[str]:
    """The paths under the datasets mount a job's command and args name (`--data=/datasets/x` too)."""
    found = []
    for word in (*j.command, *j.args):
        value = word.partition("=")[2] if word.startswith("--") and "=" in word else word
        if value == DATASETS_MOUNT or value.startswith(f"{DATASETS_MOUNT}/"):
            found.append(value)
    return found


def check_job_mount_paths(
    j: JobConfig, datasets: tuple[DatasetConfig, ...], mounted: bool, k: str, r: Reader
) -> None:
    """Nothing is at /datasets without storage.datasetsMount; a declared dataset's files are given
    to the job by `dataset:` (their directory carries the spec's digest, which no one writes by hand)."""
    for path in mount_paths(j):
        if made_by_dataset(path, datasets):
            continue
        declared = next((d for d in datasets if path.startswith(f"{DATASETS_MOUNT}/{d.name}/")), None)
        if not mounted:
            r.problem(
                f"{k}.args" if path in " ".join(j.args) else f"{k}.command",
                path,
                f"job '{j.name}' reads {path}, and nothing is mounted at {DATASETS_MOUNT} "
                "(storage.datasetsMount is false)",
                f"declare the dataset under datasets and set {k.partition(':')[2]}.dataset, or "
                f"storage.datasetsMount: true with the files in the bucket's datasets/",
            )
        elif declared is not None:
            r.problem(
                f"{k}.args" if path in " ".join(j.args) else f"{k}.command",
                path,
                f"dataset {declared.name} writes {dataset_file(declared, TRAIN_FILE)} and "
                f"{dataset_file(declared, VAL_FILE)}, not {path}",
                f"dataset: {declared.name} (it gives the job --data and --val-data)",
            )


def unmade_mount_paths(
    jobs: tuple[JobConfig, ...], datasets: tuple[DatasetConfig, ...]
) -> list[tuple[str, str]]:
    """(key, path) of each path under the datasets mount that no declared dataset makes: it must
    already be in the bucket, which only `pulumi preview` can read."""
    return [
        (f"{PROJECT}:jobs[{i}]", path)
        for i, j in enumerate(jobs)
        for path in mount_paths(j)
        if not made_by_dataset(path, datasets)
        and not any(path.startswith(f"{DATASETS_MOUNT}/{d.name}/") for d in datasets)
    ]


def mount_warnings(jobs: tuple[JobConfig, ...], datasets: tuple[DatasetConfig, ...]) -> list[str]:
    """What the offline plan says of those paths: it has no bucket to read."""
    return [
        f"WARNING: {key}: reads {path}, which no declared dataset makes; `pulumi preview` checks that "
        f"the bucket holds datasets/{path.removeprefix(f'{DATASETS_MOUNT}/')}"
        for key, path in unmade_mount_paths(jobs, datasets)
    ]


# Hub repositories whose models all ask for accepted terms and a token (meta-llama's Llama, Google's
# Gemma); others may be gated too, which only the Hub can say.
GATED_MODEL_PREFIXES = ("meta-llama/", "google/gemma")


def gated_model_warnings(jobs: tuple[JobConfig, ...], token_set: bool) -> list[str]:
    """VERL jobs that start from a gated model with no hfToken: the download fails at start."""
    if token_set:
        return []
    return [
        f"WARNING: {PROJECT}:jobs[{i}].verl.model: job '{j.name}' starts from {j.verl.model}, a gated "
        "model on the Hugging Face Hub, and the stack has no trainstack:hfToken: its download would fail "
        "(401); set it with `pulumi config set --secret hfToken hf_...`"
        for i, j in enumerate(jobs)
        if j.verl is not None and j.verl.model.startswith(GATED_MODEL_PREFIXES)
    ]


def auto_resume_warnings(jobs: tuple[JobConfig, ...], groups: tuple[GpuNodeGroupConfig, ...]) -> list[str]:
    """Training jobs on a HyperPod group of a kind HyperPod's auto-resume does not watch (a TrainJob:
    its job-auto-restart controller reads PyTorchJobs only)."""
    hyperpod = {g.name: g.instance_type for g in groups if g.hyperpod}
    return [
        f"WARNING: {PROJECT}:jobs[{i}].kind: job '{j.name}' is a {j.kind} on HyperPod group "
        f"'{j.node_group}' ({hyperpod[j.node_group]}): it gives up HyperPod's auto-resume, which "
        "watches PyTorchJobs only; after a node fault JobSet restarts its gang instead, within "
        "jobs[].maxRecreations. `kind: PyTorchJob` keeps auto-resume"
        for i, j in enumerate(jobs)
        if j.node_group in hyperpod and not KINDS[j.kind].hyperpod_auto_resume and not KINDS[j.kind].ray
    ]
