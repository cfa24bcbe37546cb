"""The plan warns, by name, of each job whose checkpoints live only in its pods' emptyDir (no S3 copy,
no shared volume): VERL, a command or a bare RayCluster on a stack that keeps checkpoints in S3."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import yaml
from support.paths import ROOT

from offline.plan import main

VERL = {"name": "grpo", "kind": "RayJob", "nodeGroup": "p5", "verl": {"algorithm": "grpo"}}


def planned(tmp_path: Path, stack: str, **config) -> str:
    data = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    for key, value in config.items():
        data["config"][f"trainstack:{key}"] = value
    stack_file = tmp_path / f"Pulumi.{stack}.yaml"
    stack_file.write_text(yaml.safe_dump(data))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--stack", stack, "--stack-file", str(stack_file), "--out", str(tmp_path / "plan")])
    assert code == 0, out.getvalue()
    return out.getvalue()


def warnings(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("WARNING: job ")]


def test_a_verl_job_on_an_existing_cluster_without_a_claim_is_warned_of(tmp_path):
    existing = yaml.safe_load((ROOT / "Pulumi.existing.yaml").read_text())["config"]
    # Beside the template's job on p5, which the group cannot hold with it: neither is waited for.
    jobs = [{**j, "wait": "none"} for j in [*existing["trainstack:jobs"], VERL]]
    (found,) = warnings(planned(tmp_path, "existing", jobs=jobs))
    assert found.startswith("WARNING: job grpo: its checkpoints in /checkpoints are on an emptyDir")
    assert found.endswith("keep them on existingCluster.checkpointClaim (a ReadWriteMany claim such as FSx)")
    # The default trainer's PyTorchJob uploads to the bucket: no warning for it.
    claim = {**existing["trainstack:existingCluster"], "checkpointClaim": "fsx-claim"}
    assert warnings(planned(tmp_path, "existing", jobs=jobs, existingCluster=claim)) == []


def test_a_created_cluster_names_fsx_for_a_bare_raycluster(tmp_path):
    jobs = [{"name": "box", "kind": "RayCluster", "nodeGroup": "gpu", "wait": "none"}]
    (found,) = warnings(planned(tmp_path, "dev", jobs=jobs))
    assert found.startswith("WARNING: job box: ") and found.endswith("storage.fsx for the job's node group")
