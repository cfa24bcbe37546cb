"""Experiment tracking in MLflow: one run per job, from rank 0 only, that never stops training.

With a tracking URI (`--tracking-uri`, default $MLFLOW_TRACKING_URI) rank 0 logs the job's
parameters once, each metrics record as it is printed, and the checkpoint location. The run id is
kept beside the checkpoints (`mlflow_run_id` in the checkpoint directory, and in S3 with
`--s3-checkpoints`), so a relaunch or a node loss continues the same run rather than starting a
second one. Without a URI nothing here runs and MLflow is never imported.

Training never waits for the server. Records go through a bounded queue to a background thread;
each request has a short timeout and few retries. While the server is down or slow, what cannot be
sent is dropped, not retried later: records arriving while the queue is full, and a batch whose
request failed. The log says when tracking stops and resumes, and at the end how many records were
dropped. At exit the thread gets `close_timeout` seconds to send what is queued.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from trainer.config import TrainConfig

RUN_ID_FILE = "mlflow_run_id"
QUEUE_RECORDS = 10_000  # about a week of records at one per minute
# MLflow's own defaults (120 s per request, 7 retries with backoff) would hold a record for minutes.
CLIENT_ENV = {"MLFLOW_HTTP_REQUEST_TIMEOUT": "10", "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1"}
RETRY_SECONDS = 30.0  # between attempts to reach a server that is down
# Job identity, set by the stack on every pod.
IDENTITY_ENV = {"job": "TRAINSTACK_JOB", "stack": "TRAINSTACK_STACK", "image": "TRAINSTACK_IMAGE"}
JOB_TAG = "trainstack.job"
STACK_TAG = "trainstack.stack"


@dataclass(frozen=True)
class RunIdStore:
    """Where the run id lives: the checkpoint directory, and its S3 mirror when there is one."""

    checkpoint_dir: Path
    s3_uri: str = ""

    def read(self) -> str | None:
        local = self.checkpoint_dir / RUN_ID_FILE
        if local.exists():
            return local.read_text().strip() or None
        if self.s3_uri:
            from trainer import storage

            bucket, prefix = storage.split_s3_uri(self.s3_uri)
            if storage.exists(bucket, f"{prefix}/{RUN_ID_FILE}"):
                storage.download_file(bucket, f"{prefix}/{RUN_ID_FILE}", local)
                return local.read_text().strip() or None
        return None

    def write(self, run_id: str) -> None:
        local = self.checkpoint_dir / RUN_ID_FILE
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(run_id)
        if self.s3_uri:
            from trainer import storage

            bucket, prefix = storage.split_s3_uri(self.s3_uri)
            storage.upload_file(local, bucket, f"{prefix}/{RUN_ID_FILE}")


def without_sagemaker_headers() -> None:
    """The image's sagemaker-mlflow plugin (for a SageMaker MLflow ARN) registers a request header
    provider that claims every request (its in_context() is always true) and fails on a tracking
    URI that is not an ARN, so MLflow would log a warning on each call to any other server: it is
    dropped from MLflow's registry for those."""
    from mlflow.tracking.request_header import registry

    found = registry._request_header_provider_registry
    found._registry = [p for p in found._registry if not type(p).__module__.startswith("sagemaker_mlflow")]


class Tracker:
    """Rank 0's MLflow run. `record` never blocks; `close` waits at most `close_timeout`."""

    def __init__(
        self,
        uri: str,
        experiment: str,
        run_ids: RunIdStore,
        params: dict,
        resumed_from: int,
        close_timeout: float = 30.0,
    ):
        self.uri, self.experiment, self.run_ids = uri, experiment, run_ids
        self.params, self.resumed_from, self.close_timeout = params, resumed_from, close_timeout
        self.run_id: str | None = None
        self.sent = self.dropped = 0
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_RECORDS)
        self._down_since: float | None = None
        self._mlflow = None  # the MlflowClient, made on the thread (importing MLflow takes a second)
        self._thread = threading.Thread(target=self._send_loop, name="mlflow-tracking", daemon=True)
        self._thread.start()

    def record(self, record: dict) -> None:
        """Queue a metrics record (its numbers, at its step); drop it if the queue is full."""
        metrics = {k: float(v) for k, v in record.items() if k != "step" and isinstance(v, int | float)}
        if "step" not in record or not metrics:
            return
        try:
            self._queue.put_nowait((int(record["step"]), metrics))
        except queue.Full:
            self.dropped += 1

    def close(self, finished: bool) -> None:
        """Send what is queued (bounded), and mark the run FINISHED when training reached its end."""
        with contextlib.suppress(queue.Full):  # a full queue behind a stuck server must not hold exit
            self._queue.put(("end", finished), timeout=self.close_timeout)
        self._thread.join(self.close_timeout)
        if self._thread.is_alive():  # still waiting on the server: what is queued is dropped
            self.dropped += sum(1 for item in list(self._queue.queue) if item[0] != "end")
            _say(f"the server did not take the last records within {self.close_timeout:g} s")
        run = f"run {self.run_id}" if self.run_id else "no run (server unreachable)"
        _say(
            f"{run} in experiment {self.experiment!r} at {self.uri}: {self.sent} records sent, {self.dropped} dropped"
        )

    # --- the background thread -------------------------------------------------------------

    def _client(self):
        for key, value in CLIENT_ENV.items():
            os.environ.setdefault(key, value)
        from mlflow.tracking import MlflowClient

        if not self.uri.startswith("arn:"):
            without_sagemaker_headers()
        return MlflowClient(tracking_uri=self.uri)

    def _open_run(self, client) -> str:
        run_id = self.run_ids.read()
        if run_id:
            from mlflow.exceptions import MlflowException

            try:
                client.set_tag(run_id, "trainstack.resumed_from", str(self.resumed_from))
                _say(f"continuing run {run_id} (resumed from step {self.resumed_from})")
                return run_id
            except MlflowException as exc:
                if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise
                _say(f"run {run_id} is not on this server (a new database?); starting a new run")
        found = client.get_experiment_by_name(self.experiment)
        experiment_id = found.experiment_id if found else client.create_experiment(self.experiment)
        job = self.params.get("job") or "trainstack"
        tags = {JOB_TAG: job, STACK_TAG: str(self.params.get("stack", ""))}
        run = client.create_run(experiment_id, run_name=job, tags=tags)
        run_id = run.info.run_id
        from mlflow.entities import Param

        params = [Param(k, str(v)) for k, v in self.params.items() if v not in (None, "")]
        client.log_batch(run_id, params=params)
        self.run_ids.write(run_id)
        _say(f"started run {run_id} in experiment {self.experiment!r}")
        return run_id

    def _send_loop(self) -> None:
        from mlflow.entities import Metric

        self._attempt(self._open)  # at the start: the run is open before the first record
        while True:
            item = self._queue.get()
            if item[0] == "end":
                if item[1] and self.run_id:
                    self._attempt(lambda: self._mlflow.set_terminated(self.run_id, "FINISHED"))
                return
            step, metrics = item
            if self._resting() or (self.run_id is None and not self._attempt(self._open)):
                self.dropped += 1
                continue
            now = int(time.time() * 1000)
            batch = [Metric(k, v, now, step) for k, v in metrics.items()]
            if self._attempt(lambda b=batch: self._mlflow.log_batch(self.run_id, metrics=b)):
                self.sent += 1
            else:
                self.dropped += 1

    def _resting(self) -> bool:
        """The server failed less than RETRY_SECONDS ago: drop without asking it again."""
        return self._down_since is not None and time.monotonic() - self._down_since < RETRY_SECONDS

    def _open(self) -> None:
        """Open the run (or find it again) once the server answers."""
        self._mlflow = self._mlflow or self._client()
        self.run_id = self._open_run(self._mlflow)

    def _attempt(self, call) -> bool:
        try:
            call()
        except Exception as exc:  # any failure of the server or the client drops the records
            self._went_down(exc)
            return False
        self._came_back()
        return True

    def _went_down(self, exc: Exception) -> None:
        if self._down_since is None:
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            _say(
                f"server unreachable ({first_line[:200]}); records are dropped until it answers, training goes on"
            )
        self._down_since = time.monotonic()

    def _came_back(self) -> None:
        if self._down_since is not None:
            _say(f"server answers again; {self.dropped} records dropped so far")
        self._down_since = None


def _say(text: str) -> None:
    sys.stderr.write(f"tracking: {text}\n")
    sys.stderr.flush()


def tracker_for(cfg: TrainConfig, rank: int, world_size: int, resumed_from: int) -> Tracker | None:
    """Rank 0's tracker when a tracking URI is set; None otherwise (MLflow not imported)."""
    if rank != 0 or not cfg.tracking_uri:
        return None
    identity = {name: os.environ.get(env, "") for name, env in IDENTITY_ENV.items()}
    params = {
        **identity,
        "model": cfg.model,
        "batch_size": cfg.batch_size,
        "seq_len": cfg.seq_len,
        "steps": cfg.steps,
        "lr": cfg.lr,
        "world_size": world_size,
        "checkpoint_every": cfg.checkpoint_every,
        "checkpoints": cfg.s3_checkpoints or str(cfg.checkpoint_dir),
    }
    run_ids = RunIdStore(cfg.checkpoint_dir, cfg.s3_checkpoints)
    return Tracker(cfg.tracking_uri, cfg.experiment, run_ids, params, resumed_from)
