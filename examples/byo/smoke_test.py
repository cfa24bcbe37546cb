"""The image build runs `python3 smoke_test.py` in the image before pushing it
(components/buildspec.yml): a few steps in one process, on CPU."""

from train import main

loss = main(["--steps", "3"])
print(f"smoke test: 3 steps, loss {loss:.4f}")
