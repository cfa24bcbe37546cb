"""A stack file read as the Pulumi CLI reads it: `Pulumi.<stack>.yaml`'s `config:` block flattened
into the values a program gets, and its secret keys; what Pulumi config cannot hold is refused
with one line naming the file, the key and (where YAML gives them) the line and column."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from config import PROJECT
from offline.engine import SECRET_MASK


class StackFileError(Exception):
    """A stack file that cannot be read as Pulumi config; the message is one line."""


MAX_DEPTH = 64  # nested lists/maps in one value
MAX_NODES = 100_000  # values after aliases are expanded (an alias bomb stays small on disk)
MAX_INT_DIGITS = 100


MERGE_TAG = "tag:yaml.org,2002:merge"


class _StackFileLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, as the Pulumi CLI does: the last one would win.

    Merge keys (`<<: *anchor`) are read as the Pulumi CLI's YAML reader reads them: the anchor's
    keys come in, and the mapping's own keys override them; only its own keys count as duplicates."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # an unhashable key (a list or map): reported by the caller
                continue
            if duplicate:
                mark = key_node.start_mark
                raise StackFileError(
                    f"line {mark.line + 1}, column {mark.column + 1}: duplicate key {key!r} "
                    f"(first at line {seen[key].line + 1}); keep one"
                )
            seen[key] = key_node.start_mark
        try:
            self.flatten_mapping(node)  # resolves `<<`
        except yaml.constructor.ConstructorError as err:
            raise yaml.constructor.ConstructorError(
                None, None, f"the merge key `<<` {err.problem}", err.problem_mark
            ) from None
        return super().construct_mapping(node, deep=deep)


def _load(path: Path) -> Any:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise StackFileError(
            f"not UTF-8 text (byte {err.start}: {err.object[err.start : err.start + 1]!r})"
        ) from None
    try:
        documents = list(yaml.load_all(text, Loader=_StackFileLoader))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise StackFileError(f"{where}{err.problem or err.context}") from None
    except yaml.YAMLError as err:
        raise StackFileError(str(err).replace("\n", " ")) from None
    except RecursionError:
        raise StackFileError(f"nested more than YAML can read here; at most {MAX_DEPTH} levels") from None
    except ValueError as err:  # Python refuses to read an integer of more than 4300 digits
        raise StackFileError(
            f"an integer of more than {MAX_INT_DIGITS} digits ({str(err).split(':')[0]})"
        ) from None
    if len(documents) > 1:
        raise StackFileError(f"{len(documents)} YAML documents; a stack file is one (remove the extra '---')")
    return documents[0] if documents else None


def _check_value(value: Any, key: str) -> None:
    """Refuse what Pulumi config cannot hold: cycles (self-referencing anchors), alias bombs,
    very deep nesting, integers too long to be a number anyone meant."""
    nodes = 0
    stack: list[tuple[Any, int, frozenset[int]]] = [(value, 0, frozenset())]
    while stack:
        item, depth, parents = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise StackFileError(f"{key}: expands to more than {MAX_NODES} values (YAML aliases?)")
        if depth > MAX_DEPTH:
            raise StackFileError(f"{key}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, (dict, list)):
            if id(item) in parents:
                raise StackFileError(f"{key}: a YAML anchor refers to itself")
            inner = parents | {id(item)}
            children = list(item.items()) if isinstance(item, dict) else list(enumerate(item))
            for child_key, child in children:
                if isinstance(item, dict) and not isinstance(child_key, str):
                    raise StackFileError(f"{key}: key {child_key!r} is not a string; quote it")
                stack.append((child, depth + 1, inner))
        elif (
            isinstance(item, int) and not isinstance(item, bool) and item.bit_length() > MAX_INT_DIGITS * 3.33
        ):
            raise StackFileError(f"{key}: an integer of more than {MAX_INT_DIGITS} digits")
        elif item is not None and not isinstance(item, (str, int, float, bool)):
            raise StackFileError(
                f"{key}: a {type(item).__name__} value ({item!r}); quote it to make it a string"
            )


def read_stack_file(path: Path) -> tuple[dict[str, str], list[str]]:
    """Flatten a Pulumi.<stack>.yaml `config:` block the way the Pulumi CLI hands it to a program.
    Raises StackFileError, with the file and (where YAML gives them) line and column."""
    try:
        data = _load(path)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise StackFileError(f"the file is a {type(data).__name__}; expected a map with a `config:` key")
        config = data.get("config") or {}
        if not isinstance(config, dict):
            raise StackFileError(f"`config:` is a {type(config).__name__}; expected a map of keys to values")
        values: dict[str, str] = {}
        secret_keys: list[str] = []
        for key, value in config.items():
            if not isinstance(key, str):
                raise StackFileError(
                    f"config key {key!r} is not a string; write keys such as trainstack:jobs"
                )
            full_key = key if ":" in key else f"{PROJECT}:{key}"
            _check_value(value, full_key)
            if _has_secure(value):
                secret_keys.append(full_key)
                value = _mask_secure(value)
            if isinstance(value, (dict, list)):
                values[full_key] = json.dumps(value)
            elif isinstance(value, bool):
                values[full_key] = "true" if value else "false"
            else:
                values[full_key] = str(value)
        return values, secret_keys
    except StackFileError as err:
        raise StackFileError(f"{path}: {err}") from None


def _has_secure(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"secure"} or any(_has_secure(v) for v in value.values())
    return isinstance(value, list) and any(_has_secure(v) for v in value)


def _mask_secure(value: Any) -> Any:
    # Ciphertext needs the stack's secrets provider; the plan only needs a stand-in.
    if isinstance(value, dict):
        return SECRET_MASK if set(value) == {"secure"} else {k: _mask_secure(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_secure(v) for v in value]
    return value
