"""How config mistakes are told (issue #38): the closest key at every level, a mis-indented key
named as such, one missing key said once, and the stack file the user gave named in the error, the
plan taking its stack's name from it."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from support.config_rules import problems
from support.verl import GRPO, L4

from offline.plan import main


def test_a_misspelt_key_inside_a_group_names_the_closest_and_is_said_once():
    msgs = problems(gpuNodeGroups=[{"name": "gpu", "instanceTyp": "g6.xlarge"}])
    assert msgs == [
        'trainstack:gpuNodeGroups[0].instanceTyp = "g6.xlarge": unknown key (did you mean instanceType?); '
        "allowed: " + msgs[0].split("allowed: ")[1]
    ]
    assert "instanceType" in msgs[0].split("allowed: ")[1]


def test_a_misspelt_key_two_levels_down_names_the_closest():
    msgs = problems(gpuNodeGroups=[L4], jobs=[{**GRPO, "verl": {"batchsize": 64}}])
    assert any(
        m.startswith("trainstack:jobs[0].verl.batchsize = 64: unknown key (did you mean batchSize?)")
        for m in msgs
    ), msgs


def test_a_key_one_indentation_level_too_far_left_is_named_as_such():
    (msg,) = problems(nodeCount=2)
    assert msg.startswith(
        'trainstack:nodeCount = "2": unknown key at the top level: this key belongs under '
        "trainstack:gpuNodeGroups[i]; check its indentation; allowed: "
    )
    assert "did you mean" not in msg  # not trainstack:network, which it only resembles


def test_a_key_of_a_nested_object_written_in_its_parent_is_named_as_such():
    msgs = problems(gpuNodeGroups=[L4], jobs=[{**GRPO, "rollouts": 8}])
    assert any(
        m.startswith(
            "trainstack:jobs[0].rollouts = 8: unknown key in trainstack:jobs[0]: this key belongs under "
            "trainstack:jobs[0].verl; check its indentation"
        )
        for m in msgs
    ), msgs


def test_a_missing_instance_type_adds_no_knock_on_error():
    """The unreadable group is left out; "at least one GPU node group is needed" would report that again."""
    (msg,) = problems(gpuNodeGroups=[{"name": "gpu", "nodeCount": 1}])
    assert msg.startswith("trainstack:gpuNodeGroups[0].instanceType = (missing): required; allowed: string")


def plan_file(tmp_path: Path, name: str, text: str, *extra: str) -> tuple[int, str, str]:
    stack_file = tmp_path / name
    stack_file.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--stack-file", str(stack_file), "--out", str(tmp_path / "out"), *extra])
    return code, out.getvalue(), err.getvalue()


BAD = "config:\n  aws:region: us-east-1\n  trainstack:nodeCount: 2\n"
GOOD = (
    "config:\n  aws:region: us-east-1\n  trainstack:image:\n    builder: docker\n"
    "  trainstack:cluster:\n    publicAccessCidrs: [198.51.100.7/32]\n"
)


def test_a_stack_file_is_planned_as_the_stack_its_name_says(tmp_path):
    code, out, err = plan_file(tmp_path, "Pulumi.llama.yaml", GOOD)
    assert code == 0, err
    assert out.startswith("Offline plan of stack 'llama': ")
    assert (tmp_path / "out" / "llama" / "resources.json").is_file()
    assert not (tmp_path / "out" / "dev").exists()
    code, out, err = plan_file(tmp_path, "mine.yaml", GOOD)
    assert code == 0 and out.startswith("Offline plan of stack 'mine': ")
    assert (tmp_path / "out" / "mine" / "resources.json").is_file()
    assert not (tmp_path / "out" / "dev").exists()


def test_a_config_error_names_the_stack_file_given(tmp_path):
    code, _, err = plan_file(tmp_path, "Pulumi.llama.yaml", BAD)
    assert code == 2
    assert f"stack 'llama' has 1 config problem(s); fix them in {tmp_path / 'Pulumi.llama.yaml'} " in err
    assert "Pulumi.dev.yaml" not in err


@pytest.mark.parametrize(
    ("name", "extra", "said"),
    [
        ("llama-c4.yaml", (), "note: planning {file} as stack 'llama-c4', its name; pass --stack NAME"),
        ("Pulumi.llama.yaml", ("--stack", "other"), "note: planning {file} as stack 'other' (--stack)"),
    ],
)
def test_the_plan_says_which_stack_it_takes_when_the_name_does_not(tmp_path, name, extra, said):
    code, _, err = plan_file(tmp_path, name, BAD, *extra)
    assert code == 2
    assert err.startswith(said.format(file=tmp_path / name))
    assert f"fix them in {tmp_path / name} " in err
