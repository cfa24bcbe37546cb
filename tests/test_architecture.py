"""The layers hold: no import cycle among the project's modules (imports under TYPE_CHECKING and
inside functions included), a pure domain layer, and a `trainstack` command that needs only what
is packaged with it."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Import roots: the program's packages at the top, the training image's `trainer` under workload/.
SOURCE_ROOTS = {ROOT: ("__main__", "account_checks", "cli", "components", "config", "conventions",
                       "domain", "offline", "planes", "stack_outputs", "stacks"),
                ROOT / "workload": ("trainer",)}  # fmt: skip
# What the domain layer may import besides the standard library: facts, never resources or clients.
DOMAIN_ALLOWED = ("conventions", "domain", "stack_outputs")
# `pip install .` ships these with the command (pyproject.toml), and nothing else of the program.
CLI_ALLOWED = ("cli", "conventions", "stack_outputs")


def module_files() -> dict[str, Path]:
    found = {}
    for root, tops in SOURCE_ROOTS.items():
        for top in tops:
            single = root / f"{top}.py"
            paths = [single] if single.exists() else sorted((root / top).rglob("*.py"))
            for path in paths:
                parts = path.relative_to(root).with_suffix("").parts
                name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
                found[name] = path
    return found


MODULES = module_files()


def imports_of(name: str, path: Path) -> set[str]:
    """Every project module `name` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from a import b` names module a.b when there is one, else something defined in a.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def top(module: str) -> str:
    return module.partition(".")[0]


def test_the_project_is_read_whole():
    """The walk finds every layer (a renamed package would otherwise drop out of every rule)."""
    assert {top(m) for m in MODULES} == {t for tops in SOURCE_ROOTS.values() for t in tops}
    assert {"planes", "stacks", "components.jobs.kind", "config.checks", "trainer.train", "cli.main"} <= set(
        MODULES
    )


def test_no_import_cycle_among_the_projects_modules():
    assert cycles(GRAPH) == []


def test_the_cycle_finder_sees_a_cycle_hidden_under_type_checking(tmp_path):
    """The rule itself: a guarded import counts (the old config <-> components cycle was one)."""
    (tmp_path / "a.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from b import B\n")
    (tmp_path / "b.py").write_text("from a import A\n")
    names = {"a": tmp_path / "a.py", "b": tmp_path / "b.py"}
    saved = dict(MODULES)
    MODULES.clear()
    MODULES.update(names)
    try:
        graph = {n: imports_of(n, p) for n, p in names.items()}
    finally:
        MODULES.clear()
        MODULES.update(saved)
    assert cycles(graph) == [["a", "b"]]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if top(m) == "domain"))
def test_the_domain_layer_imports_only_the_standard_library_and_the_lowest_layer(module):
    tree = ast.parse(MODULES[module].read_text())
    outside = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        for n in names:
            root = top(n)
            if root not in DOMAIN_ALLOWED and root not in sys.stdlib_module_names and root != "__future__":
                outside.add(n)
    assert outside == set(), f"{module} imports {sorted(outside)}: no Pulumi, boto3, config or components"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if top(m) == "cli"))
def test_the_command_needs_only_what_is_packaged_with_it(module):
    assert {top(m) for m in GRAPH[module]} <= set(CLI_ALLOWED)


def users_of(package: str) -> set[str]:
    return {m for m, deps in GRAPH.items() if any(top(d) == package for d in deps) and top(m) != package}


def test_only_the_stacks_compose_the_planes_and_only_the_program_and_the_plan_build_a_stack():
    assert users_of("planes") <= {m for m in MODULES if top(m) in ("stacks", "offline")}
    assert users_of("stacks") <= {"__main__"} | {m for m in MODULES if top(m) == "offline"}


def test_no_product_module_asks_whether_it_is_mocked():
    """The offline plan hands the program its world (account_checks.world); only offline/ knows Pulumi's mocks."""
    asking = {
        m
        for m, path in MODULES.items()
        if top(m) not in ("offline", "trainer") and re.search(r"\bmocks\b|MockMonitor", path.read_text())
    }
    assert asking == set()


# A kind of job is one module of the jobs wing, reached through the wing's list of kinds only: adding
# one touches the wing and the config's list of kinds.
KIND_MODULES = {
    "components.jobs.pytorchjob",
    "components.jobs.trainjob",
    "components.jobs.rayjob",
    "components.jobs.raycluster",
}


def test_a_job_kind_is_reached_only_through_the_wings_list_of_kinds():
    assert set(MODULES) >= KIND_MODULES
    reaching = {m for m, deps in GRAPH.items() if deps & KIND_MODULES and m not in KIND_MODULES}
    assert reaching == {"components.jobs.kinds"}


def test_config_checks_and_components_share_the_domain_not_each_other():
    """Config checks size jobs with the domain's placement and quota; they never reach into
    components, and components never into planes."""
    assert not {d for m, deps in GRAPH.items() if top(m) == "config" for d in deps if top(d) == "components"}
    assert not {d for m, deps in GRAPH.items() if top(m) == "components" for d in deps if top(d) == "planes"}


# The layers, lowest first, as docs/architecture.md's "Where things live" lists them: a module imports only
# its own package or the layers before its own (or beside it in the same row). The image's `trainer` is a world of its own.
LAYERS = (
    ("conventions", "stack_outputs"),
    ("domain",),
    ("config",),
    ("components",),
    ("account_checks",),
    ("planes",),
    ("stacks", "__main__"),
    ("offline",),
    ("cli",),
    ("trainer",),
)
LAYER_OF = {package: i for i, packages in enumerate(LAYERS) for package in packages}


def test_every_package_has_a_layer():
    assert {top(m) for m in MODULES} == set(LAYER_OF)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_own_package_and_the_layers_below(module):
    mine = top(module)
    upward = {
        d
        for d in GRAPH[module]
        if top(d) != mine and (LAYER_OF[top(d)] > LAYER_OF[mine] or top(d) == "trainer" or mine == "trainer")
    }
    assert upward == set(), f"{module} imports {sorted(upward)}, which are not below its layer"
