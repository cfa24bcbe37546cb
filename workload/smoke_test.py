"""Run inside the freshly built image before it is pushed (buildspec.yml): fail fast, push nothing broken.

Checks the imports the trainers need, that the EFA stack and a C compiler are in the image (the
runtime base image has neither of its own), reports torch/CUDA/NCCL versions, and runs one forward
and backward pass of the tiny model on CPU (CodeBuild has no GPU).
"""

import shutil
import sys
from pathlib import Path

import torch

# What the EFA installer puts in the image (globs under /), and what NCCL loads to use EFA.
EFA_FILES = {
    "aws-ofi-nccl (NCCL's EFA plugin)": "opt/amazon/ofi-nccl/lib/*/libnccl-net*.so*",
    "libfabric": "opt/amazon/efa/lib/libfabric.so*",
}


def image_problems(root: Path = Path("/"), which=shutil.which) -> list[str]:
    """What the image lacks: EFA's libraries, and the C compiler Triton builds its launcher with."""
    problems = [
        f"{what} missing: no /{pattern} (did the EFA installer run?)"
        for what, pattern in EFA_FILES.items()
        if not any(root.glob(pattern))
    ]
    if which("gcc") is None and which("cc") is None:
        problems.append("no C compiler on PATH: torch.compile (Triton) needs gcc at run time")
    return problems


def main() -> int:
    import boto3
    import datasets  # noqa: F401  (trainer.prepare_data)
    import ray
    import ray.train.torch
    import tokenizers  # noqa: F401
    from trainer import launch, preflight, prepare_data, ray_train, train  # noqa: F401  (every entrypoint imports)
    from trainer.model import MODEL_SIZES, Transformer

    nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.backends.cuda.is_built() else "n/a"
    print(
        f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {nccl}, ray {ray.__version__}, boto3 {boto3.__version__}"
    )
    problems = image_problems()
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
