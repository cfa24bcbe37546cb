"""How `trainstack` says things: colours and progress on a terminal, plain text when piped, JSON
with --json; and the small formats its tables share."""

from __future__ import annotations

import json
import os
import re
import sys
from datetime import UTC, datetime
from typing import Any


class Output:
    """Colours and progress on a terminal, plain text when piped, JSON with --json."""

    def __init__(self, as_json: bool, stream=None):
        self.as_json = as_json
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty() and not os.environ.get("NO_COLOR")

    def colour(self, text: str, ok: bool | None) -> str:
        if not self.tty or ok is None:
            return text
        return f"\033[{32 if ok else 31}m{text}\033[0m"

    def line(self, text: str = "") -> None:
        print(text, file=self.stream, flush=True)

    def progress(self, text: str) -> None:
        if self.tty and not self.as_json:
            print(f"\r{text}\033[K", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty and not self.as_json:
            print("\r\033[K", end="", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        """A remark beside the answer (stderr), so stdout stays the answer, JSON included."""
        print(text, file=sys.stderr, flush=True)

    def dump(self, data: Any) -> None:
        print(json.dumps(camel_keys(data), indent=2, default=str), file=self.stream)


SNAKE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)+")


def camel_keys(data: Any) -> Any:
    """--json's keys in one style, the stack outputs' camelCase: dataclass fields and the trainer's
    metrics records (`tokens_per_s`) come out as `tokensPerS`. Names (jobs, groups) are DNS labels,
    never snake_case, so only field names change."""
    if isinstance(data, dict):
        return {_camel(k) if isinstance(k, str) else k: camel_keys(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [camel_keys(v) for v in data]
    return data


def _camel(key: str) -> str:
    if not SNAKE.fullmatch(key):
        return key
    first, *rest = key.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def age(timestamp: str | None) -> str:
    if not timestamp:
        return "-"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(timestamp.replace("Z", "+00:00"))).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"
