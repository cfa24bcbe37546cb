"""The README and docs/ say only what is true of this repository: every relative link and #anchor
resolves (GitHub's heading anchors), every `make` target, `python -m` module, stack file and
examples/ path named exists, every `trainstack:` key is one the schema reads, the config reference
is the schema's, and the README stays a front door."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from support.paths import ROOT

from config.reference import reference_rows, render_reference
from domain.names import STACK_TAG

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*```")


def split(text: str) -> tuple[list[str], list[str]]:
    """(prose lines, code: fenced lines and inline `code` spans)."""
    prose, code, fenced = [], [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif fenced:
            code.append(line)
        else:
            prose.append(line)
            code += re.findall(r"`([^`]+)`", line)
    return prose, code


def github_anchor(heading: str) -> str:
    """GitHub's heading id, as Flet/github-slugger's `slugger()` (index.js) makes it from the rendered
    text: lowercased, trimmed, every character but letters, digits, `_`, `-` and spaces dropped, each
    space a `-` (runs are not collapsed); a repeated slug gets `-1`, `-2` (`anchors`)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    prose, _ = split(path.read_text())
    for line in prose:
        m = re.match(r"^#{1,6} (.+)$", line)
        if m:
            slug = github_anchor(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def test_github_anchor_rules():
    assert github_anchor("Before the first `pulumi up`: what a new account needs") == (
        "before-the-first-pulumi-up-what-a-new-account-needs"
    )
    assert github_anchor("Operating a running stack: `trainstack`") == "operating-a-running-stack-trainstack"
    assert github_anchor("VERL: GRPO and PPO on Ray") == "verl-grpo-and-ppo-on-ray"


def links(path: Path) -> list[str]:
    prose, _ = split(path.read_text())
    return [t for line in prose for t in re.findall(r"\]\(([^)\s]+)\)", line)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(doc):
    broken = []
    for target in links(doc):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists() or not dest.resolve().is_relative_to(ROOT):
            broken.append(f"{target}: no such file")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert broken == []


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text()
    variables = dict(re.findall(r"^([A-Z_]+)\s*[:?]?=\s*(\S*)", text, re.M))
    targets = set()
    for line in re.findall(r"^([^\s#=][^=:]*):(?!=)", text, re.M):
        for target in line.split():
            targets.add(re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), m.group(0)), target))
    return targets


def commands(pattern: str) -> list[tuple[str, str]]:
    found = []
    for doc in DOCS:
        _, code = split(doc.read_text())
        found += [(doc.name, m) for snippet in code for m in re.findall(pattern, snippet)]
    return found


def test_every_make_target_named_exists():
    named = commands(r"(?:^|[\s;&(])make\s+([\w./-]+)")
    assert {"plan", "test", "docs", "kind-cluster"} <= {t for _, t in named}
    targets = make_targets()
    assert [(doc, t) for doc, t in named if t not in targets] == []


def module_exists(name: str) -> bool:
    parts = name.split(".")
    for base in (ROOT, ROOT / "workload"):
        path = base.joinpath(*parts)
        if path.with_suffix(".py").is_file() or (path / "__init__.py").is_file():
            return True
    return importlib.util.find_spec(parts[0]) is not None and importlib.util.find_spec(name) is not None


def test_every_python_module_named_exists():
    named = commands(r"(?:python3?|torchrun\b[^`]*?)\s+-m\s+([A-Za-z_][\w.]*)")
    assert {"offline.plan", "trainer.prepare_data", "trainer.train"} <= {m for _, m in named}
    assert [(doc, m) for doc, m in named if not module_exists(m)] == []


def test_every_stack_file_and_example_named_exists():
    missing = []
    for doc in DOCS:
        text = doc.read_text()
        # A file the doc tells you to make (`cp examples/x.yaml Pulumi.mine.yaml`) is yours, not ours.
        made = set(re.findall(r"\bcp \S+ (\S+)", text))
        for path in re.findall(r"(?<![\w/.])((?:Pulumi\.[\w-]+\.yaml)|(?:examples/[\w./-]*[\w/]))", text):
            if path not in made and not (ROOT / path).exists():
                missing.append(f"{doc.name}: {path}")
    assert missing == []


def config_keys() -> set[str]:
    return {key for key, *_ in reference_rows()}


def test_every_trainstack_key_named_is_one_the_schema_reads():
    keys = config_keys()
    unknown = []
    for doc in DOCS:
        # `trainstack:<module>:<Type>` tokens are resource types, not keys.
        for name in re.findall(r"trainstack:[\w.<>\[\]|-]*[\w>\]](?![\w:])", doc.read_text()):
            # An index as `pulumi config set --path` takes it: an item of a list of objects, or of strings.
            key = re.sub(r"\[\]$", "", re.sub(r"\[\d+\]", "[]", name))
            pattern = re.escape(key).replace(re.escape("<name>"), r"[^.]+")
            if name != STACK_TAG and not any(re.fullmatch(pattern, k) for k in keys):
                unknown.append(f"{doc.name}: {name}")
    assert unknown == []


def test_the_config_reference_is_the_schemas():
    text = (ROOT / "docs" / "config-reference.md").read_text()
    assert render_reference() in text, "docs/config-reference.md is stale: run `make docs`"


def test_the_reference_lists_nested_optional_blocks_and_shows_a_secret():
    text = (ROOT / "docs" / "config-reference.md").read_text()
    for key in (
        "trainstack:jobs[].verl.algorithm",
        "trainstack:jobs[].verl.tensorParallel",
        "trainstack:existingCluster.s3.uri",
        "trainstack:existingCluster.s3.credentialsSecret",
    ):
        assert f"| `{key}` |" in text
    assert "trainstack:hfToken:\n    secure: v1:" in text


def test_the_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.split()) <= 2000
    for must in (
        "make plan",
        "make test",
        "make plan STACK=",
        "pulumi config set --secret hfToken",
        "secure:",
    ):
        assert must in readme
    assert {t.partition("#")[0] for t in links(ROOT / "README.md") if t.startswith("docs/")} >= {
        f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md") if p.name != "README.md"
    }
