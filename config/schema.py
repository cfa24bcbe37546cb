"""A small typed reader from plain config data to frozen dataclasses.

Each field carries the key a user writes in `Pulumi.<stack>.yaml` and a one-line doc, so the
same declaration drives parsing, error messages and the config reference (docs/config-reference.md). Every
problem is collected (not raised at the first one) so a user fixes a config in one pass.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Union

import pulumi


def setting(key: str, doc: str, default: Any = dataclasses.MISSING, *, factory=None):
    """Declare a config field: its YAML key, its doc line and its default (none: required)."""
    meta = {"key": key, "doc": doc}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclass(frozen=True)
class Problem:
    key: str  # as a user writes it: trainstack:gpuNodeGroups[0].instanceType
    value: Any
    reason: str
    allowed: str

    def __str__(self) -> str:
        shown = "(missing)" if self.value is _ABSENT else json.dumps(self.value, default=str)
        return f"{self.key} = {shown}: {self.reason}; allowed: {self.allowed}"


class ConfigError(pulumi.RunError):
    """Raised once with every problem; RunError makes Pulumi print it without a traceback.
    `stack_file`: the file the config came from (the offline plan's --stack-file), else the
    stack's own Pulumi.<stack>.yaml."""

    def __init__(self, stack: str, problems: list[Problem], stack_file: str | None = None):
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"stack '{stack}' has {len(problems)} config problem(s); "
            f"fix them in {stack_file or f'Pulumi.{stack}.yaml'} (or with `pulumi config set`):\n{lines}"
        )


class _Absent:
    def __repr__(self) -> str:
        return "(missing)"


_ABSENT = ABSENT = _Absent()


def describe(tp: Any) -> str:
    """Human description of a type, for 'allowed' and the config reference."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        return " | ".join(str(a) for a in args)
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return describe(inner[0]) + " (optional)"
    if origin in (list, tuple):
        return f"list of {describe(args[0])}"
    if origin is dict:
        return "object (any values)" if args[1] is Any else "map of string to string"
    if dataclasses.is_dataclass(tp):
        return "object"
    return {str: "string", int: "integer", float: "number", bool: "true | false"}[tp]


class Reader:
    """Reads plain data into a dataclass, recording problems instead of raising."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []
        # Keys whose values had the wrong type or were outside an enum: the field keeps its default
        # so every other value is still checked, and rules about these keys stay quiet.
        self.malformed_keys: list[str] = []

    @property
    def malformed(self) -> bool:
        return bool(self.malformed_keys)

    def problem(self, key: str, value: Any, reason: str, allowed: str) -> None:
        self.problems.append(Problem(key, value, reason, allowed))

    def ranges(self, prefix: str, rows: tuple[tuple[str, int, int, int], ...]) -> None:
        """(key, value, lowest, highest) rows: a problem for each value outside its range."""
        for key, value, low, high in rows:
            if not low <= value <= high:
                self.problem(f"{prefix}.{key}", value, "out of range", f"{low}-{high}")

    def shape_problem(self, key: str, value: Any, reason: str, allowed: str) -> None:
        self.malformed_keys.append(key)
        self.problem(key, value, reason, allowed)

    def under_malformed(self, key: str) -> bool:
        return any(key == m or key.startswith((f"{m}.", f"{m}[")) for m in self.malformed_keys)

    def read(self, tp: Any, value: Any, key: str) -> Any:
        origin = typing.get_origin(tp)
        args = typing.get_args(tp)
        if origin in (Union, types.UnionType):
            if value is None:
                return None
            (inner,) = [a for a in args if a is not type(None)]
            return self.read(inner, value, key)
        if origin is Literal:
            if value in args and not isinstance(value, bool):
                return value
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                # An unquoted `1.34` in YAML is a number; `1.30` would even be 1.3.
                if str(value) in args:
                    return str(value)
                self.shape_problem(
                    key, value, "a number, not one of the names", f'{describe(tp)} (quoted, e.g. "{args[0]}")'
                )
                return value
            self.shape_problem(key, value, "not a known value", describe(tp))
            return value
        if origin in (list, tuple):
            if not isinstance(value, list):
                self.shape_problem(key, value, "expected a list", describe(tp))
                return []
            return tuple(self.read(args[0], v, f"{key}[{i}]") for i, v in enumerate(value))
        if origin is dict and args[1] is Any:
            if not isinstance(value, dict):
                self.shape_problem(key, value, "expected an object", describe(tp))
                return {}
            return dict(value)
        if origin is dict:
            if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                self.shape_problem(key, value, "expected a map of strings", describe(tp))
                return {}
            return dict(value)
        if dataclasses.is_dataclass(tp):
            return self.read_object(tp, value, key)
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)  # `hourlyUsd: 3` means 3.0
        # bool is an int in Python: keep `nodeCount: true` from passing as 1.
        ok = isinstance(value, tp) and not (tp is int and isinstance(value, bool))
        if not ok:
            self.shape_problem(key, value, f"expected {describe(tp)}", describe(tp))
        return value

    def read_object(self, cls: type, value: Any, key: str) -> Any:
        if not isinstance(value, dict):
            self.shape_problem(key, value, "expected an object", f"keys {', '.join(keys_of(cls))}")
            value = {}
        hints = typing.get_type_hints(cls)
        known = keys_of(cls)
        misspelt = set()  # required keys an unknown key already names as its likely meaning
        for unknown in sorted(set(value) - set(known)):
            hint = unknown_key_hint(str(unknown), known, key_homes(cls, f"{key}."), f"in {key}")
            misspelt.add(closest(str(unknown), known))
            self.problem(f"{key}.{unknown}", value[unknown], f"unknown key{hint}", ", ".join(sorted(known)))
        kwargs = {}
        for f in dataclasses.fields(cls):
            yaml_key = f.metadata["key"]
            sub = f"{key}.{yaml_key}"
            if yaml_key in value:
                read = self.read_field(hints[f.name], value[yaml_key], sub)
                if read is not _ABSENT:
                    kwargs[f.name] = read
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                if yaml_key in misspelt:  # `instanceTyp`: one mistake, said once ("did you mean")
                    self.malformed_keys.append(sub)
                else:
                    self.shape_problem(sub, _ABSENT, "required", describe(hints[f.name]))
        try:
            return cls(**kwargs)
        except TypeError:  # a required field was missing: already recorded
            return None

    def read_field(self, tp: Any, value: Any, key: str) -> Any:
        """`read`, or _ABSENT when the value is malformed (the field then keeps its default). A list
        of objects keeps its readable entries: each bad entry is reported and left out."""
        before = len(self.malformed_keys)
        read = self.read(tp, value, key)
        if len(self.malformed_keys) == before:
            return read
        item = typing.get_args(tp)[0] if typing.get_origin(tp) is tuple else None
        if dataclasses.is_dataclass(item) and isinstance(value, list):
            return tuple(v for v in read if v is not None)
        return _ABSENT


def keys_of(cls: type) -> list[str]:
    return [f.metadata["key"] for f in dataclasses.fields(cls)]


def unknown_key_hint(key: str, valid: Iterable[str], homes: dict[str, list[str]], where: str) -> str:
    """What a user most likely meant by an unknown key found `where` ("in trainstack:jobs[0]"): a
    valid key in another case, a key of a nested object one indentation level too far left, or the
    nearest valid key; "" if nothing is near."""
    valid = list(valid)
    if any(v.lower() == key.lower() for v in valid):
        return f" (did you mean {closest(key, valid)}?)"
    if key in homes:
        return f" {where}: this key belongs under {' or '.join(homes[key])}; check its indentation"
    meant = closest(key, valid)
    return f" (did you mean {meant}?)" if meant else ""


def closest(key: str, valid: Iterable[str]) -> str | None:
    """The valid key a misspelt one most likely meant: the same letters in another case first
    (`batchsize`), else difflib's nearest above 0.6 similarity."""
    valid = list(valid)
    same_letters = [v for v in valid if v.lower() == key.lower()]
    found = same_letters or difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return found[0] if found else None


def key_homes(cls: type, prefix: str) -> dict[str, list[str]]:
    """Every key nested below `cls`'s own, with where it belongs (`nodeCount` ->
    [`trainstack:gpuNodeGroups[i]`]): a key one level too far left in YAML lands a level up, and
    is then named as an indentation mistake, not matched to a key it merely resembles."""
    homes: dict[str, list[str]] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if "key" not in f.metadata:  # set by the program (the stack's name), not in the file
            continue
        tp, path = hints[f.name], f"{prefix}{f.metadata['key']}"
        args = [a for a in typing.get_args(tp) if a not in (type(None), Ellipsis)]
        if typing.get_origin(tp) in (list, tuple) and args:
            tp, path = args[0], f"{path}[i]"
        elif typing.get_origin(tp) in (Union, types.UnionType):
            tp = args[0]
        if dataclasses.is_dataclass(tp):
            for key in keys_of(tp):
                homes.setdefault(key, []).append(path)
            for key, paths in key_homes(tp, f"{path}.").items():
                homes.setdefault(key, []).extend(paths)
    return homes
