"""What every trainer process does once its imports are done."""

from __future__ import annotations

import gc


def set_aside_startup_objects() -> None:
    """Move what the imports made (torch alone makes about a million objects, all alive until the
    process exits) out of the collector's sight, `gc.freeze`: no later collection walks them again,
    neither the full ones the setup's churn starts (the model, the data, the checkpoint's load) nor
    the one CPython runs at interpreter exit (Python/pylifecycle.c finalize_modules). About half a
    second of CPU at each process start and exit on this project's machines."""
    gc.freeze()
