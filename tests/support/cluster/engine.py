"""The real Pulumi engine on the stack's unchanged program: the CLI built from source
(tools/cluster/pulumi), pulumi-kubernetes's provider from PATH, the local file backend.

The Python language host (pulumi-language-python) is not served by the Go module proxy at any
version, so the program runs as an Automation API inline program: the Python SDK serves the
language runtime to the CLI itself (`pulumi up --client`, pulumi pkg/engine/plugin_host.go), and
the CLI does the rest as for any program. A stack operation runs in its own process
(`python -m support.cluster.engine`), away from the mocks other tests set in theirs.

    python -m support.cluster.engine up|preview|unchanged|destroy|refresh WORK_DIR STACK

`unchanged` is `pulumi preview --expect-no-changes`, then the same with `--refresh`: it fails where
the program would change anything against the state, as the next `up` runs, or against the cluster
read again. WORK_DIR holds Pulumi.yaml and
Pulumi.STACK.yaml, and stands for the project's directory, where the provider runs what the program
names by a relative path (`./tools/helm-keep-on-uninstall`); the environment names the backend and passphrase
(`Engine.env`). Prints one JSON line: the operation's change summary."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from support.cluster.binaries import binary
from support.cluster.objects import Objects
from support.cluster.takeover import TakeoverDetector, exported_state
from support.paths import ROOT

PROJECT = "trainstack"


# The program's own top-level modules and packages (the import roots tests/test_architecture.py reads).
PROGRAM_MODULES = ("account_checks", "cli", "components", "config", "conventions", "domain", "offline",
                   "planes", "stack_outputs", "stacks")  # fmt: skip


def program() -> None:
    """The stack's program: this checkout's, or the one at TRAINSTACK_PROGRAM_ROOT (another release's
    source), imported from there alone: the modules this process already took from this checkout
    (the harness's own imports) are dropped first."""
    root = Path(os.environ.get("TRAINSTACK_PROGRAM_ROOT") or ROOT)
    if root != ROOT:
        for name in list(sys.modules):
            if name.split(".")[0] in PROGRAM_MODULES:
                del sys.modules[name]
        sys.path.insert(0, str(root))
    runpy.run_path(str(root / "__main__.py"), run_name="__main__")


def run(operation: str, work_dir: str, stack_name: str) -> dict:
    from pulumi import automation as auto

    bin_dir = Path(os.environ["TRAINSTACK_CLUSTER_BIN"])
    stack = auto.select_stack(
        stack_name,
        PROJECT,
        program,
        opts=auto.LocalWorkspaceOptions(
            work_dir=work_dir, pulumi_command=auto.PulumiCommand(root=str(bin_dir.parent))
        ),
    )
    if operation == "up":
        result = stack.up(color="never", on_output=print)
        return {"result": result.summary.result, "changes": result.summary.resource_changes or {}}
    if operation == "preview":
        result = stack.preview(color="never", on_output=print, diff=True)
        return {"changes": result.change_summary}
    if operation == "unchanged":
        # As CI's next `up` runs (no refresh: the state's live objects), then with the cluster read again.
        for refresh in (False, True):
            result = stack.preview(
                color="never", on_output=print, diff=True, refresh=refresh, expect_no_changes=True
            )
        return {"changes": result.change_summary}
    if operation == "destroy":
        result = stack.destroy(color="never", on_output=print)
        return {"result": result.summary.result, "changes": result.summary.resource_changes or {}}
    if operation == "refresh":
        result = stack.refresh(color="never", on_output=print)
        return {"result": result.summary.result, "changes": result.summary.resource_changes or {}}
    raise SystemExit(f"unknown operation {operation}")


@dataclass
class Outcome:
    returncode: int
    output: str
    changes: dict

    def __str__(self) -> str:
        return self.output[-6000:]


class Engine:
    """A stack of the unchanged program in `directory`, on the file backend there. Every `up` and
    `destroy` runs inside the takeover detector (support/cluster/takeover.py): what was on the cluster
    before the stack's first operation must come out of each one untouched and present. `source`: the
    root of another release's program to run instead of this checkout's; two Engines on one
    `directory` and `stack` share the stack's state, as an upgrade does."""

    def __init__(
        self, directory: Path, bin_dir: Path, stack: str, objects: Objects, source: Path | None = None
    ):
        self.dir = directory
        self.stack = stack
        self.bin_dir = bin_dir
        self.detector = TakeoverDetector(objects)
        for name in ("pulumi", "pulumi-resource-kubernetes"):
            binary(name)
        (directory / "state").mkdir(parents=True, exist_ok=True)
        if not (directory / "tools").exists():
            (directory / "tools").symlink_to(ROOT / "tools")
        (directory / "Pulumi.yaml").write_text(
            yaml.safe_dump(
                {"name": PROJECT, "runtime": {"name": "python"}, "description": "trainstack under test"}
            )
        )
        self.env = {
            **os.environ,
            "PULUMI_BACKEND_URL": f"file://{directory / 'state'}",
            "PULUMI_CONFIG_PASSPHRASE": "trainstack-test",
            "PULUMI_HOME": str(directory / "pulumi-home"),
            "PULUMI_SKIP_UPDATE_CHECK": "true",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "TRAINSTACK_CLUSTER_BIN": str(bin_dir),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
            "TRAINSTACK_PROGRAM_ROOT": str(source or ROOT),
        }
        subprocess.run(
            [str(bin_dir / "pulumi"), "stack", "select", "--create", stack, "--non-interactive"],
            cwd=directory,
            env=self.env,
            check=True,
            capture_output=True,
        )

    def configure(self, config: dict, secrets: dict[str, str] | None = None) -> None:
        """The stack's config, and `secrets` set as `pulumi config set --secret` sets them
        (encrypted with the stack's passphrase, whose salt the file keeps)."""
        path = self.dir / f"Pulumi.{self.stack}.yaml"
        kept = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
        path.write_text(yaml.safe_dump({**kept, "config": config}, sort_keys=False))
        for key, value in (secrets or {}).items():
            subprocess.run(
                [
                    str(self.bin_dir / "pulumi"),
                    "config",
                    "set",
                    "--secret",
                    "--stack",
                    self.stack,
                    key,
                    value,
                ],
                cwd=self.dir,
                env=self.env,
                check=True,
                capture_output=True,
            )

    def __call__(self, operation: str, timeout: float = 600) -> Outcome:
        changing = operation in ("up", "destroy")
        if changing:
            self.detector.before()
        outcome = self._run(operation, timeout)
        if changing:
            state = exported_state(str(self.bin_dir / "pulumi"), self.dir, self.stack, self.env)
            self.detector.after(operation, state)
        return outcome

    def _run(self, operation: str, timeout: float) -> Outcome:
        done = subprocess.run(
            [sys.executable, "-m", "support.cluster.engine", operation, str(self.dir), self.stack],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        lines = done.stdout.strip().splitlines()
        changes = json.loads(lines[-1]).get("changes", {}) if done.returncode == 0 and lines else {}
        return Outcome(done.returncode, done.stdout + done.stderr, changes)


if __name__ == "__main__":
    operation, work_dir, stack_name = sys.argv[1:4]
    print(json.dumps(run(operation, work_dir, stack_name)))
