"""A Helm chart repository on loopback, serving the charts of ../shared/charts: what a stack on the
tier names as `operators.chartRepository`, since the upstream repositories are out of reach. Each chart
is packaged by the real helm (`helm package`) and indexed by it (`helm repo index`), and the provider's
own Helm fetches `index.yaml` and the archive over HTTP as from any repository."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

from offline.nodes import charts_dir
from support.charts import run_helm
from support.ports import unused_port


class ChartRepository:
    def __init__(self, directory: Path, charts: tuple[str, ...]):
        """`charts`: folders of ../shared/charts (`kueue-0.19.2`)."""
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = unused_port()
        self.url = f"http://127.0.0.1:{self.port}"
        for chart in charts:
            run_helm("package", str(charts_dir() / chart), "--destination", str(self.dir), timeout=120)
        run_helm("repo", "index", str(self.dir), "--url", self.url, timeout=120)
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
