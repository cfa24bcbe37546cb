"""Broken stack files, as a new user writes them: every one ends in exit 2 and one clear message
naming the key (or the file's line and column), never a traceback or a silently dropped setting."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.paths import ROOT

from offline.plan import main

# An event loop left to the garbage collector prints `Exception ignored ... Invalid file descriptor`.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")


def run_plan(tmp_path: Path, text: str | bytes, stack: str = "t") -> tuple[int, str, str]:
    stack_file = tmp_path / f"Pulumi.{stack}.yaml"
    if isinstance(text, bytes):
        stack_file.write_bytes(text)
    else:
        stack_file.write_text(text)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--stack", stack, "--stack-file", str(stack_file), "--out", str(tmp_path / "out")])
    return code, out.getvalue(), err.getvalue()


def prod_text(**replace: str) -> str:
    text = (ROOT / "Pulumi.prod.yaml").read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return text


def test_a_misspelt_namespace_is_an_error_naming_the_closest_key(tmp_path):
    text = prod_text(**{"  trainstack:storage:\n": "  trainstak:storage:\n"})
    code, _, err = run_plan(tmp_path, text)
    assert code == 2
    assert (
        "trainstak:storage" in err
        and "unknown namespace 'trainstak' (did you mean trainstack:storage?)" in err
    )


MALFORMED = {
    "syntax": ("config:\n  aws:region: [us-east-1\n", r"line 3, column 1: "),
    "config is a list": ("config:\n  - a\n  - b\n", r"`config:` is a list; expected a map"),
    "config is a scalar": ("config: 5\n", r"`config:` is a int; expected a map"),
    "file is a list": ("- config\n", r"the file is a list"),
    "integer key": ("config:\n  123: x\n", r"config key 123 is not a string"),
    "boolean key": ("config:\n  true: x\n", r"config key True is not a string"),
    "second document": ("config:\n  aws:region: us-east-1\n---\nconfig: {}\n", r"2 YAML documents"),
    "huge integer": (
        "config:\n  trainstack:tags:\n    n: " + "9" * 5000 + "\n",
        r"integer of more than 100 digits",
    ),
    "deep nesting": ("config:\n  trainstack:tags: " + "[" * 300 + "]" * 300 + "\n", r"nested more than"),
    "self-referencing anchor": ("config:\n  trainstack:tags: &a [*a]\n", r"a YAML anchor refers to itself"),
    "alias bomb": (
        "config:\n  trainstack:tags:\n"
        + "".join(f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else '1'}]\n" for i in range(8)),
        r"expands to more than 100000 values",
    ),
    "nested non-string key": ("config:\n  trainstack:tags:\n    1: x\n", r"key 1 is not a string"),
    "date value": ("config:\n  trainstack:tags:\n    d: 2026-01-01\n", r"a date value"),
    "merge of a scalar": (
        "config:\n  trainstack:tags:\n    <<: 5\n",
        r"line 3, column 9: the merge key `<<` expected a mapping or list of mappings for merging, but found scalar",
    ),
    "duplicate beside a merge": (
        "config:\n  trainstack:tags:\n    <<: {a: x}\n    b: y\n    b: z\n",
        r"line 5, column 5: duplicate key 'b' \(first at line 4\)",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_files_are_one_line_errors(tmp_path, case):
    text, expected = MALFORMED[case]
    code, out, err = run_plan(tmp_path, text)
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'Pulumi.t.yaml'}: ")
    assert re.search(expected, line), line


def test_invalid_utf8_is_an_error(tmp_path):
    code, _, err = run_plan(tmp_path, b"config:\n  aws:region: us-east-1\xff\n")
    assert code == 2 and "not UTF-8 text (byte 31" in err


def test_duplicate_keys_are_refused_with_their_lines(tmp_path):
    text = prod_text() + "  trainstack:storage: {}\n"
    code, _, err = run_plan(tmp_path, text)
    assert code == 2
    assert re.search(r"line \d+, column 3: duplicate key 'trainstack:storage' \(first at line \d+\)", err)


def config_error(tmp_path: Path, config: dict) -> str:
    code, out, err = run_plan(tmp_path, yaml.safe_dump({"config": {"aws:region": "us-east-1", **config}}))
    assert code == 2, out
    assert "Traceback" not in out + err
    return err


def test_a_very_long_build_context_is_a_config_error(tmp_path):
    err = config_error(tmp_path, {"trainstack:image": {"context": "x" * 5000}})
    assert "trainstack:image.context" in err and "no Dockerfile in that directory" in err


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"aws:region": "us-east-1\n"}, "aws:region"),
        ({"aws:region": "us-east-\u0661"}, "aws:region"),  # an Arabic-Indic digit
        (
            {"trainstack:gpuNodeGroups": [{"name": "gpu\n", "instanceType": "g6.xlarge"}]},
            "gpuNodeGroups[0].name",
        ),
        (
            {"trainstack:jobs": [{"name": "train\n", "kind": "PyTorchJob", "nodeGroup": "gpu"}]},
            "jobs[0].name",
        ),
        (
            {"trainstack:cluster": {"adminPrincipals": ["arn:aws:iam::１２３４５６７８９０１２:role/Admin"]}},
            "cluster.adminPrincipals[0]",
        ),
        (
            {
                "trainstack:network": {
                    "existingVpcId": "vpc-0123456789abcdef0",
                    "existingPrivateSubnetIds": ["subnet-0aaaaaaaaaaaaaaaa\n", "subnet-0bbbbbbbbbbbbbbbb"],
                }
            },
            "network.existingPrivateSubnetIds[0]",
        ),
    ],
)
def test_patterns_match_whole_ascii_strings(tmp_path, config, key):
    assert key in config_error(tmp_path, config)


def test_repeated_subnets_do_not_count_twice(tmp_path):
    subnet = "subnet-0aaaaaaaaaaaaaaaa"
    err = config_error(
        tmp_path,
        {
            "trainstack:network": {
                "existingVpcId": "vpc-0123456789abcdef0",
                "existingPrivateSubnetIds": [subnet, subnet],
            }
        },
    )
    assert f'trainstack:network.existingPrivateSubnetIds = "{subnet}": listed 2 times' in err


def test_one_type_error_does_not_hide_the_others(tmp_path):
    err = config_error(
        tmp_path,
        {
            "trainstack:tags": 5,
            "trainstack:gpuNodeGroups": [{"name": "gpu", "instanceType": "g6.xlarge", "nodeCount": -1}],
        },
    )
    assert "trainstack:tags = 5: expected a map of strings" in err
    assert "trainstack:gpuNodeGroups[0].nodeCount = -1: out of range" in err


def test_system_node_sizes_are_reported_under_their_own_key(tmp_path):
    err = config_error(tmp_path, {"trainstack:cluster": {"systemNodeGroup": {"minSize": 0}}})
    assert "trainstack:cluster.systemNodeGroup.minSize = 0: out of range" in err
    assert "desiredSize" not in err


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"trainstack:image": {"baseImage": ""}}, 'trainstack:image.baseImage = "": not an image reference'),
        (
            {"trainstack:image": {"baseImage": "  "}},
            'trainstack:image.baseImage = "  ": not an image reference',
        ),
        ({"trainstack:tags": {"team": "a\u0007b"}}, "trainstack:tags.team"),
        ({"trainstack:tags": {"team": "a\u0000b"}}, "trainstack:tags.team"),
        ({"trainstack:tags": {"team": "a;b"}}, "trainstack:tags.team"),
    ],
)
def test_odd_strings_are_refused(tmp_path, config, expected):
    assert expected in config_error(tmp_path, config)


def test_an_unquoted_kubernetes_version_is_read_as_meant(tmp_path):
    code, _, err = run_plan(
        tmp_path, "config:\n  aws:region: us-east-1\n  trainstack:cluster:\n    kubernetesVersion: 1.34\n"
    )
    assert code == 0, err
    resources = json.loads((tmp_path / "out" / "t" / "resources.json").read_text())
    (cluster,) = [r for r in resources if r["type"] == "eks:index:Cluster"]
    assert cluster["inputs"]["version"] == "1.34"
    err = config_error(tmp_path, {"trainstack:cluster": {"kubernetesVersion": 1.3}})
    assert (
        'trainstack:cluster.kubernetesVersion = 1.3: a number, not one of the names; allowed: 1.33 | 1.34 | 1.35 | 1.36 (quoted, e.g. "1.33")'
        in err
    )


# --- property-based: mutate the real stack files ---------------------------------------------------

STACKS = {name: yaml.safe_load((ROOT / f"Pulumi.{name}.yaml").read_text()) for name in ("dev", "prod")}


def paths(value, prefix=()):
    """Every path into a loaded stack file's config (maps and lists)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, (*prefix, i))


ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", " ", "\n", "\x00", "us-east-1\n", "١", "-1", "0", "1e309", "p5.48xlarge", "system"]),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


@st.composite
def mutated_stack_file(draw) -> str:
    stack = draw(st.sampled_from(sorted(STACKS)))
    data = json.loads(json.dumps(STACKS[stack]))
    config = data["config"]
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(list(paths(config))[1:]))
        parent = config
        for part in path[:-1]:
            parent = parent[part]
        if not isinstance(parent, (dict, list)) or (isinstance(parent, list) and path[-1] >= len(parent)):
            continue
        kind = draw(st.sampled_from(["delete", "rename", "replace", "number"]))
        if kind == "delete":
            del parent[path[-1]]
        elif kind == "rename" and isinstance(parent, dict):
            key = path[-1]
            new_key = draw(
                st.sampled_from([key.upper(), key[:-1], key + "s", key.replace(":", ""), "x" + key])
            )
            parent[new_key] = parent.pop(key)
        elif kind == "number":
            parent[path[-1]] = draw(st.sampled_from([-1, 0, 10**9, 2.5, 65, 100000]))
        else:
            parent[path[-1]] = draw(ODD_VALUES)
    text = yaml.safe_dump(data, allow_unicode=True)
    if draw(st.booleans()) and draw(st.integers(0, 4)) == 0:  # malformed YAML now and then
        cut = draw(st.integers(0, len(text)))
        text = (
            text[:cut]
            + draw(st.sampled_from(["[", "{", ":", "\t", "&a *a", "'", "- ", "\n---\n"]))
            + text[cut:]
        )
    return text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=mutated_stack_file())
def test_any_mutated_stack_file_ends_cleanly(tmp_path, text):
    code, out, err = run_plan(tmp_path, text)
    assert "Traceback" not in out + err
    assert code in (0, 2), (code, err)
    if code == 2:
        (line,) = err.strip().splitlines()[:1]
        assert line.startswith("error: ")
        # Names a key as a user writes it, or the file (with line and column where YAML gives them).
        assert re.search(r"(trainstack|aws):[A-Za-z]|Pulumi\.t\.yaml", err), err


def test_yaml_merge_keys_are_read_as_pulumi_reads_them(tmp_path):
    """`<<: *anchor` brings the anchor's keys in; the mapping's own keys override them."""
    text = prod_text(
        **{
            "  trainstack:jobs:\n": "  trainstack:jobs:\n"
            "    - &smoke {name: smoke, kind: PyTorchJob, nodeGroup: system, nodes: 1, steps: 10}\n"
            "    - <<: *smoke\n"
            "      name: smoke-long\n"
            "      steps: 50\n"
        }
    )
    from offline.stack_file import read_stack_file

    path = tmp_path / "Pulumi.t.yaml"
    path.write_text(text)
    values, _ = read_stack_file(path)
    jobs = json.loads(values["trainstack:jobs"])
    assert jobs[:2] == [
        {"name": "smoke", "kind": "PyTorchJob", "nodeGroup": "system", "nodes": 1, "steps": 10},
        {"name": "smoke-long", "kind": "PyTorchJob", "nodeGroup": "system", "nodes": 1, "steps": 50},
    ]
    code, out, err = run_plan(tmp_path, text)
    assert code == 0, err
    assert "\n  smoke-long " in out  # the job, in the Jobs section the plan prints first
