"""Run inside the freshly built image before it is pushed (buildspec.yml): fail fast, push nothing broken.

Checks the imports the trainers need, that the EFA stack and a C compiler are in the image (the
CUDA base image has neither of its own), that torch is the version workload/requirements.txt pins
(the one the tests run), that NCCL can load the aws-ofi-nccl plugin, reports torch/CUDA/NCCL
versions, and runs one forward and backward pass of the tiny model on CPU (CodeBuild has no GPU).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch

# What the EFA installer puts in the image (globs under /), and what NCCL loads to use EFA.
EFA_FILES = {
    "aws-ofi-nccl (NCCL's EFA plugin)": "opt/amazon/ofi-nccl/lib/*/libnccl-net*.so*",
    "libfabric": "opt/amazon/efa/lib/libfabric.so*",
}
REQUIREMENTS = Path(__file__).with_name("requirements.txt")

# The ncclNet_vN plugin interfaces each NCCL release looks for, newest first: it dlsym's
# "ncclNetPlugin_vN" for each and takes the first the plugin exports (ncclNetVersion[] and
# ncclNetPluginLoad in NVIDIA/nccl src/plugin/net.cc, v2.27.3-1 to v2.30.7-1). aws-ofi-nccl exports
# v4..v10 from 1.15, v11 from 1.17.2 and v12 from 1.20 (src/nccl_ofi_interface_nvidia.cpp).
NCCL_NET_VERSIONS: dict[tuple[int, int], tuple[int, ...]] = {
    (2, 27): (10, 9, 8, 7, 6),
    (2, 28): (11, 10, 9, 8, 7, 6),
    (2, 30): (12, 11, 10, 9, 8, 7, 6),
}
DEFAULT_NET_PLUGIN = "libnccl-net.so"  # what NCCL opens when NCCL_NET_PLUGIN is unset


def efa_problems(root: Path = Path("/")) -> list[str]:
    """EFA's libraries the image lacks (this image's and the VERL image's)."""
    return [
        f"{what} missing: no /{pattern} (did the EFA installer run?)"
        for what, pattern in EFA_FILES.items()
        if not any(root.glob(pattern))
    ]


def image_problems(root: Path = Path("/"), which=shutil.which) -> list[str]:
    """What the image lacks: EFA's libraries, and the C compiler Triton builds its launcher with."""
    problems = efa_problems(root)
    if which("gcc") is None and which("cc") is None:
        problems.append("no C compiler on PATH: torch.compile (Triton) needs gcc at run time")
    return problems


def pinned_version(package: str, requirements: Path = REQUIREMENTS) -> str | None:
    """The `package==X` pin in a requirements file, if any."""
    pin = re.compile(rf"{re.escape(package)}==(\S+)")
    for line in requirements.read_text().splitlines():
        if m := pin.fullmatch(line.split("#", 1)[0].strip()):
            return m.group(1)
    return None


def torch_problems(installed: str, pinned: str | None) -> list[str]:
    """The image's torch against the pin the tests run (a local tag such as +cu130 aside)."""
    if pinned is None:
        return ["requirements.txt pins no torch==X: the image's torch is not the tested one"]
    if installed.split("+", 1)[0] != pinned:
        return [f"torch {installed} in the image, but requirements.txt pins torch=={pinned}"]
    return []


def net_versions(nccl: tuple[int, ...]) -> tuple[int, ...]:
    """The ncclNet versions this NCCL loads, newest first; () for one older than 2.27. A release
    newer than the table is taken to load what the newest known one does."""
    known = [v for v in NCCL_NET_VERSIONS if v <= tuple(nccl[:2])]
    return NCCL_NET_VERSIONS[max(known)] if known else ()


def plugin_names(env_value: str | None) -> list[str]:
    """The names NCCL dlopen()s for NCCL_NET_PLUGIN, in order (openPluginLib in NVIDIA/nccl
    src/plugin/plugin_open.cc, initPluginLibsOnceFunc in src/plugin/net.cc): unset, the default
    libnccl-net.so; "none", nothing; else each comma-separated entry as given and, if it is neither
    a path nor a lib*.so name, also libnccl-net-<entry>.so."""
    if env_value is None:
        return [DEFAULT_NET_PLUGIN]
    if env_value.lower() == "none":
        return []
    names = []
    for entry in filter(None, env_value.split(",")):
        names.append(entry)
        if "/" not in entry and not (entry.startswith("lib") and entry.endswith(".so")):
            names.append(f"libnccl-net-{entry}.so")
    return names


def dlopen_symbols(name: str) -> Callable[[str], bool]:
    """Open a shared library as NCCL does (RTLD_NOW | RTLD_LOCAL: every dependency, libfabric
    included, must resolve now); raises OSError with dlerror's message."""
    lib = ctypes.CDLL(name, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    return lambda symbol: hasattr(lib, symbol)


def net_plugin_check(
    nccl: tuple[int, ...],
    env_value: str | None,
    open_lib: Callable[[str], Callable[[str], bool]] = dlopen_symbols,
) -> tuple[str, list[str]]:
    """(What was found, problems): the first plugin name that opens, and the newest ncclNet
    version it exports that torch's NCCL loads; NCCL would take the same one."""
    nccl_name = ".".join(map(str, nccl))
    accepted = net_versions(nccl)
    if not accepted:
        return "", [f"NCCL {nccl_name} is older than 2.27: no known ncclNet versions to check"]
    names = plugin_names(env_value)
    if not names:
        return "", ["NCCL_NET_PLUGIN=none: NCCL would load no network plugin (no EFA)"]
    errors = []
    for name in names:
        try:
            has = open_lib(name)
        except OSError as e:
            errors.append(f"{name}: {e}")
            continue
        exported = [v for v in range(2, 32) if has(f"ncclNetPlugin_v{v}")]
        chosen = next((v for v in accepted if v in exported), None)
        found = f"{name} exports ncclNet {', '.join(f'v{v}' for v in exported) or 'none'}"
        if chosen is None:
            return found, [
                f"{found}; torch's NCCL {nccl_name} loads only v{accepted[-1]}-v{accepted[0]}: "
                "it would fall back to sockets (no EFA)"
            ]
        return f"{found}; torch's NCCL {nccl_name} loads v{chosen}", []
    return "", [f"NCCL could not load its network plugin ({'; '.join(errors)}): no EFA"]


def nccl_problems(nccl: tuple[int, ...] | None) -> list[str]:
    """torch's NCCL, and the OFI plugin loaded as NCCL would load it for a job (named when found)."""
    if nccl is None:
        return ["torch is a CPU build: no NCCL"]
    found, problems = net_plugin_check(nccl, os.environ.get("NCCL_NET_PLUGIN"))
    if found:
        print(f"OFI plugin: {found}")
    return problems


def main() -> int:
    import boto3
    import datasets  # noqa: F401  (trainer.prepare_data)
    import ray
    import ray.train.torch
    import tokenizers  # noqa: F401
    from trainer import launch, preflight, prepare_data, ray_train, train  # noqa: F401  (every entrypoint imports)
    from trainer.model import MODEL_SIZES, Transformer

    nccl = torch.cuda.nccl.version() if torch.backends.cuda.is_built() else None
    print(
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"NCCL {'.'.join(map(str, nccl)) if nccl else 'n/a'}, ray {ray.__version__}, boto3 {boto3.__version__}"
    )
    problems = image_problems() + torch_problems(torch.__version__, pinned_version("torch"))
    problems += nccl_problems(nccl)
    if problems:
        print("smoke test failed: " + "; ".join(problems))
        return 1
    cfg = MODEL_SIZES["tiny"]
    model = Transformer(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (2, 16))
    logits = model(tokens)
    if logits.shape != (2, 16, cfg.vocab_size) or not torch.isfinite(logits).all():
        print(f"smoke test failed: logits {tuple(logits.shape)}, finite={bool(torch.isfinite(logits).all())}")
        return 1
    logits.sum().backward()
    print("smoke test passed: tiny model forward and backward on CPU")
    return 0


if __name__ == "__main__":
    sys.exit(main())
