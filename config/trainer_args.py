"""The default trainer's command line as the plan reads it: a job's `args` parsed by the trainer's own
parsers (workload/trainer/flags.py), so the plan refuses what the trainer would refuse, in its words,
and sizes the job with the values it will run.

The flags file is loaded from its path: the program does not import the image's `trainer` package
(its other modules need torch), and that one file needs only the standard library.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from domain.model_facts import MODEL_SHAPES
from domain.retention import cadence_args

FLAGS_FILE = Path(__file__).resolve().parents[1] / "workload" / "trainer" / "flags.py"


def _load_flags() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trainstack_trainer_flags", FLAGS_FILE)
    assert spec is not None and spec.loader is not None, FLAGS_FILE
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


flags = _load_flags()
MAX_SEQ_LEN = {name: shape.max_seq_len for name, shape in MODEL_SHAPES.items()}

# Flags the stack gives every default-trainer job from its other settings: in `args` they would come
# after the stack's and win (argparse keeps the last), behind the plan's back. Where to set each.
STACK_SET = {
    "--model": "model",
    "--steps": "steps",
    "--checkpoint-dir": "nothing: the stack mounts the job's checkpoints at /checkpoints",
    "--s3-checkpoints": "nothing: the stack mirrors checkpoints to its bucket (storage)",
    "--keep-checkpoints": "storage.checkpointsKept",
    "--keep-every": "storage.checkpointKeepEvery",
    "--preflight-gpus-per-node": "nothing: the stack checks the group's nodes",
    "--preflight-efa-per-node": "nothing: the stack checks the group's nodes",
    "--preflight-min-bus-bandwidth": "nothing: the stack checks the group's nodes",
}
# trainer.ray_train's own flags, which the stack sets on a RayJob from the job and its group.
RAY_STACK_SET = {
    "--num-workers": "nodes (one worker per GPU of each node)",
    "--use-gpu": "nothing: the node group decides",
    "--storage-path": "nothing: Ray's run lives under the job's checkpoints",
}
# torchrun's flags: the stack runs torchrun itself (PyTorchJob nprocPerNode, Trainer's torch
# plugin), one process per GPU of each of the job's nodes. In `args` they reach the trainer.
_TORCHRUN_NAMES = ("nproc-per-node", "nnodes", "node-rank", "master-addr", "master-port", "rdzv-endpoint",
                   "rdzv-backend", "rdzv-id", "rdzv-conf", "max-restarts", "standalone")  # fmt: skip
# torch/distributed/run.py takes each with dashes and with underscores.
TORCHRUN_FLAGS = frozenset(f"--{n}" for name in _TORCHRUN_NAMES for n in (name, name.replace("-", "_")))


class ArgsRefused(ValueError):
    """A job's `args` the trainer would refuse: the flag or value, why, and what to give instead."""

    def __init__(self, value: str, reason: str, allowed: str):
        super().__init__(reason)
        self.value, self.reason, self.allowed = value, reason, allowed


@dataclass(frozen=True)
class TrainerRun:
    """The values the trainer will run with, as its parser resolves them."""

    batch_size: int
    seq_len: int  # tokens per sequence: the model's maximum where the args leave it 0
    checkpoint_every: int  # steps; 0: not by steps
    checkpoint_minutes: float  # 0: not by time
    float8: bool
    compiled: bool  # on GPUs: the trainer compiles unless --no-compile
    # How long survivors wait in a collective with a dead peer, once the first step is done.
    collective_timeout_s: float
    log_every: int = 10  # steps between the ranks' agreements (where a SIGTERM is heard)


def _raise(message: str) -> None:
    raise ArgsRefused("", message, "")


def _refusing(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser, answering with an exception instead of printing its usage and exiting."""
    parser.error = _raise  # type: ignore[method-assign]
    return parser


def _resolve(token: str, names: list[str]) -> str:
    """The flag a `--name` or `--name=value` token stands for, as argparse reads it (a unique prefix
    names its flag): the flag itself, or the token's name where it names none or several."""
    name = token.partition("=")[0]
    if name in names:
        return name
    prefixed = [n for n in names if n.startswith(name)]
    return prefixed[0] if len(prefixed) == 1 else name


def read(model: str, steps: int, args: tuple[str, ...], ray: bool) -> TrainerRun:
    """The run the trainer makes of this job: `args` after the stack's own flags, through
    trainer.ray_train's parser first on a RayJob. Raises ArgsRefused with the trainer's sentence."""
    train = _refusing(flags.train_parser(MAX_SEQ_LEN))
    names = flags.flag_names(train) + (flags.flag_names(flags.ray_parser()) if ray else [])
    set_by_stack = {**STACK_SET, **(RAY_STACK_SET if ray else {})}
    for token in (t for t in args if t.startswith("--")):
        flag = _resolve(token, names)
        if flag in TORCHRUN_FLAGS:
            raise ArgsRefused(
                token,
                f"{flag} is torchrun's, and the stack runs torchrun with one process per GPU of each node",
                "nodes and nodeGroup",
            )
        if flag in set_by_stack:
            raise ArgsRefused(token, f"the stack sets {flag} for the default trainer", set_by_stack[flag])
    rest = list(args)
    if ray:
        try:
            _, rest = _refusing(flags.ray_parser()).parse_known_args(rest)
        except ArgsRefused as err:
            raise ArgsRefused(
                " ".join(args), str(err), "the trainer's flags (python -m trainer.ray_train)"
            ) from None
    try:
        stack = ["--model", model, "--steps", str(steps), *cadence_args(model)]
        parsed, unknown = train.parse_known_args([*stack, *rest])
    except ArgsRefused as err:
        raise ArgsRefused(
            " ".join(args), str(err), "the trainer's flags (python -m trainer.train --help)"
        ) from None
    if unknown:
        nearest = difflib.get_close_matches(unknown[0].partition("=")[0], names, n=1)
        raise ArgsRefused(
            unknown[0],
            "not an argument of the default trainer, which would refuse it at start (exit 2)",
            nearest[0] if nearest else "the trainer's flags (python -m trainer.train --help)",
        )
    refusal = flags.value_refusal(parsed, MAX_SEQ_LEN)
    if refusal:
        raise ArgsRefused(refusal.partition(":")[0], refusal, "a value the trainer takes")
    return TrainerRun(
        batch_size=parsed.batch_size,
        seq_len=parsed.seq_len or MAX_SEQ_LEN[model],
        checkpoint_every=parsed.checkpoint_every,
        checkpoint_minutes=parsed.checkpoint_minutes,
        float8=parsed.float8,
        compiled=parsed.compile is not False,
        collective_timeout_s=parsed.train_collective_timeout or parsed.collective_timeout,
        log_every=parsed.log_every,
    )
