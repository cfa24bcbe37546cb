"""A Helm chart repository on loopback, serving the charts of ../shared/charts: what a stack on the
tier names as `operators.chartRepository`, since the upstream repositories are out of reach. Each chart
is packaged by the real helm (`helm package`) and indexed by it (`helm repo index`), and the provider's
own Helm fetches `index.yaml` and the archive over HTTP as from any repository."""

from __future__ import annotations

import functools
import http.server
import subprocess
import threading
from pathlib import Path

from offline.nodes import charts_dir, helm_binary
from support.ports import unused_port


class ChartRepository:
    def __init__(self, directory: Path, charts: tuple[str, ...]):
        """`charts`: folders of ../shared/charts (`kueue-0.19.2`)."""
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = unused_port()
        self.url = f"http://127.0.0.1:{self.port}"
        for chart in charts:
            _helm("package", str(charts_dir() / chart), "--destination", str(self.dir))
        _helm("repo", "index", str(self.dir), "--url", self.url)
        handler = functools.partial(_Quiet, directory=str(self.dir))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass


def _helm(*args: str) -> None:
    done = subprocess.run(
        [str(helm_binary()), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)}: {done.stderr}")
