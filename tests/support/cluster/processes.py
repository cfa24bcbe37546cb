"""Local processes the harness starts, each logging to a file, stopped in reverse order."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path


class Processes:
    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.running: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - the process owns it
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        log.close()
        self.running.append((name, proc))
        return proc

    def log_tail(self, name: str, lines: int = 30) -> str:
        path = self.log_dir / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def wait_until(
        self, what: str, check: Callable[[], bool], timeout: float, name: str | None = None
    ) -> None:
        """Polls `check` until it holds; fails naming `what` (and the process's last log lines)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if name is not None:
                proc = dict(self.running)[name]
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}")
            with contextlib.suppress(Exception):
                if check():
                    return
            time.sleep(0.2)
        raise TimeoutError(
            f"{what} not ready after {timeout:.0f} s" + (f":\n{self.log_tail(name)}" if name else "")
        )

    def stop(self, name: str) -> None:
        for i, (n, proc) in enumerate(self.running):
            if n == name:
                _end(proc)
                del self.running[i]
                return

    def stop_all(self) -> None:
        while self.running:
            _, proc = self.running.pop()
            _end(proc)


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
