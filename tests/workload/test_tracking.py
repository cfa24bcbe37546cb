"""Experiment tracking: the trainer against a real MLflow server on loopback (SQLite, local artifacts)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from support.paths import ROOT
from support.ports import unused_port
from support.training import losses, metrics_of, torchrun
from trainer import mlflow_run
from trainer.config import parse_args


class MlflowServer:
    """`mlflow server` as its own process; stop() kills it as a crash would, start() brings it back."""

    def __init__(self, root: Path):
        self.root = root
        self.port = unused_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(self.port)]
        cmd += ["--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}"]
        cmd += ["--artifacts-destination", str(self.root / "artifacts"), "--workers", "1"]
        log = (self.root / "server.log").open("a")
        # No job runner (huey workers) beside the server: these tests use tracking only.
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            self._wait_until_it_answers()
        except BaseException:
            self.stop()  # a start that fails leaves no server behind
            raise

    def _wait_until_it_answers(self) -> None:
        deadline = time.monotonic() + 120
        while True:
            assert self.proc.poll() is None, (self.root / "server.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the MLflow server did not answer in 120 s"
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            # Not up yet: refused, reset, or an answer cut short while it starts.
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """One server for the module (its start migrates a fresh database: seconds); tests use their
    own experiments. A test that stops it starts it again."""
    pytest.importorskip("mlflow", reason="the MLflow server comes from requirements-test.txt")
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    server.start()
    yield server
    server.stop()


def wait_for_line(proc: subprocess.Popen, text: str, seen: list[str]) -> None:
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            return
    raise AssertionError(f"the run ended before {text!r}:\n{''.join(seen)[-3000:]}")


# Both MLflow tests on one worker: one server start (a fresh database's migrations take seconds).
pytestmark = pytest.mark.xdist_group("mlflow-server")


@pytest.mark.slow(seconds=50)  # with the server's start (the fixture)
def test_one_run_per_job_continued_on_resume_and_training_outlives_the_server(tmp_path, mlflow_server):
    from mlflow.tracking import MlflowClient

    env = {
        "MLFLOW_TRACKING_URI": mlflow_server.uri,
        "MLFLOW_EXPERIMENT_NAME": "llama",
        "TRAINSTACK_JOB": "fsdp",
        "TRAINSTACK_STACK": "dev",
    }
    # Two ranks, 10 steps, a record every 5: one run, each record once (rank 0 only).
    proc = torchrun(tmp_path, "--steps", "10", "--checkpoint-every", "10", env=env)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    client = MlflowClient(mlflow_server.uri)
    experiment = client.get_experiment_by_name("llama")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "fsdp" and run.info.status == "FINISHED"
    assert run.data.tags[mlflow_run.JOB_TAG] == "fsdp" and run.data.tags[mlflow_run.STACK_TAG] == "dev"
    params = run.data.params
    assert (params["model"], params["world_size"], params["steps"], params["job"]) == (
        "tiny",
        "2",
        "10",
        "fsdp",
    )
    assert params["checkpoints"] == str(tmp_path / "ckpt")
    history = client.get_metric_history(run.info.run_id, "loss")
    logged = losses(metrics_of(out))
    assert {m.step: m.value for m in history} == pytest.approx(logged)
    assert [m.step for m in history] == [5, 10]  # once per record, not once per rank
    assert {"tokens_per_s", "goodput", "step_time_s"} <= set(run.data.metrics)
    assert (tmp_path / "ckpt" / mlflow_run.RUN_ID_FILE).read_text() == run.info.run_id

    # The job resumes (a relaunch, a lost node): the same run goes on. The server then dies.
    proc = torchrun(tmp_path, "--steps", "30", "--checkpoint-every", "10", env=env)
    seen: list[str] = []
    wait_for_line(proc, '"step": 15', seen)
    deadline = time.monotonic() + 120
    while 15 not in [m.step for m in client.get_metric_history(run.info.run_id, "loss")]:
        assert time.monotonic() < deadline, "step 15 never reached the server"
        time.sleep(0.2)
    mlflow_server.stop()
    rest, _ = proc.communicate(timeout=300)
    out = "".join(seen) + rest
    assert proc.returncode == 0, out[-3000:]  # training finished without its server
    assert losses(metrics_of(out))[30] > 0
    assert f"tracking: continuing run {run.info.run_id} (resumed from step 10)" in out
    assert "tracking: server unreachable" in out and "records are dropped until it answers" in out
    summary = next(line for line in out.splitlines() if "records sent" in line)
    assert int(summary.split(" records sent, ")[1].split()[0]) > 0  # 20, 25, 30: dropped, and said

    mlflow_server.start()  # the same database: what reached it is there
    (again,) = client.search_runs([experiment.experiment_id])
    assert again.info.run_id == run.info.run_id
    assert again.data.tags["trainstack.resumed_from"] == "10"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
    assert steps[:3] == [5, 10, 15] and len(steps) == len(set(steps))


def test_without_a_uri_mlflow_is_never_imported():
    code = (
        "import sys; from trainer.config import parse_args; from trainer import mlflow_run; "
        "args = parse_args([]); assert not args.tracking_uri; "
        "assert mlflow_run.tracker_for(args, 0, 2, 0) is None; assert 'mlflow' not in sys.modules"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "workload", env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def test_a_server_that_never_answers_drops_records_and_says_so(tmp_path, capsys, monkeypatch):
    """Nothing listens at the URI: record() returns at once, and close() reports what was dropped."""
    pytest.importorskip("mlflow", reason="the MLflow client comes from requirements-test.txt")
    port = unused_port()  # connections are refused
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    args = parse_args(["--tracking-uri", f"http://127.0.0.1:{port}", "--checkpoint-dir", str(tmp_path)])
    tracker = mlflow_run.tracker_for(args, rank=0, world_size=2, resumed_from=0)
    for step in (5, 10, 15):
        tracker.record({"step": step, "loss": 1.0, "mfu": None})
    tracker.close(finished=True)
    err = capsys.readouterr().err
    assert "tracking: server unreachable" in err
    assert "no run (server unreachable)" in err and "0 records sent, 3 dropped" in err
    assert not (tmp_path / mlflow_run.RUN_ID_FILE).exists()
    assert mlflow_run.tracker_for(args, rank=1, world_size=2, resumed_from=0) is None  # rank 0 only


def test_status_and_metrics_name_the_run_and_read_it_from_mlflow(tmp_path, mlflow_server):
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient
    from support.fake_cluster import OUTPUTS, healthy, run

    client = MlflowClient(mlflow_server.uri)
    experiment = client.create_experiment("cli-status")
    logged = client.create_run(experiment, run_name="fsdp", tags={mlflow_run.JOB_TAG: "fsdp"})
    run_id = logged.info.run_id
    client.log_batch(run_id, metrics=[Metric("loss", v, 0, s) for s, v in ((5, 5.5), (10, 4.25))])
    client.log_batch(run_id, metrics=[Metric("tokens_per_s", 9000.0, 0, 10)])
    outputs = {
        **OUTPUTS,
        "trackingUri": "http://mlflow.mlflow.svc.cluster.local:5000",
        "trackingExperiment": "cli-status",
        "trackingPortForward": "kubectl -n mlflow port-forward svc/mlflow 5000:5000",
    }
    c = healthy()
    # In the cluster only: status says how to reach it.
    _, out = run(c, tmp_path, "status", "--json", outputs=outputs)
    assert "port-forward svc/mlflow" in json.loads(out)["jobs"][0]["mlflowRun"]["note"]
    _, out = run(c, tmp_path, "status", "--json", "--tracking-uri", mlflow_server.uri, outputs=outputs)
    assert json.loads(out)["jobs"][0]["mlflowRun"] == {
        "id": run_id,
        "status": "RUNNING",
        "experiment": "cli-status",
    }
    code, out = run(
        c, tmp_path, "metrics", "fsdp", "--json", "--tracking-uri", mlflow_server.uri, outputs=outputs
    )
    data = json.loads(out)
    assert code == 0 and data["source"] == f"MLflow run {run_id}"
    assert data["records"] == [{"step": 5, "loss": 5.5}, {"step": 10, "loss": 4.25, "tokensPerS": 9000.0}]
    # A server that does not answer: the logs, and a note saying why.
    dead = f"http://127.0.0.1:{unused_port()}"
    code, out = run(c, tmp_path, "metrics", "fsdp", "--json", "--tracking-uri", dead, outputs=outputs)
    assert code == 0 and json.loads(out)["source"] == "logs" and json.loads(out)["records"]


def test_a_run_id_the_server_does_not_know_starts_a_new_run(tmp_path, mlflow_server, capsys):
    """The server's database was replaced (a new in-cluster volume): the kept id names no run there."""
    from mlflow.tracking import MlflowClient

    (tmp_path / mlflow_run.RUN_ID_FILE).write_text("0123456789abcdef0123456789abcdef")
    args = parse_args(
        ["--tracking-uri", mlflow_server.uri, "--checkpoint-dir", str(tmp_path), "--experiment", "gone"]
    )
    tracker = mlflow_run.tracker_for(args, rank=0, world_size=1, resumed_from=40)
    tracker.record({"step": 45, "loss": 2.5})
    tracker.close(finished=False)
    err = capsys.readouterr().err
    assert "is not on this server (a new database?); starting a new run" in err
    assert "1 records sent, 0 dropped" in err
    new_id = (tmp_path / mlflow_run.RUN_ID_FILE).read_text()
    history = MlflowClient(mlflow_server.uri).get_metric_history(new_id, "loss")
    assert [(m.step, m.value) for m in history] == [(45, 2.5)]
