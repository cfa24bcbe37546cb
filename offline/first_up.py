"""What the plan's time estimates need beyond the registrations: the size of each image a job
pulls, and how long each dataset's preparation takes (offline/timeline.py weighs them)."""

from __future__ import annotations

from collections.abc import Callable

from components.datasets import job_name
from domain.catalog import image_compressed_gb, image_pull_minutes, verl_image_compressed_gb
from domain.datasets import preparation_minutes
from offline.engine import PlanRun
from offline.timeline import TRAINING_KINDS, images_of


def image_sizes(run: PlanRun, cfg) -> Callable[[str], float]:
    """Compressed GB by image reference: the training image by its base; the VERL image a VERL job
    runs besides it (its data step uses the training image); a job's own image is sized as the
    training image (its size is not known here). A kind image is loaded onto the nodes, never pulled."""
    if cfg.image.builder == "kind":
        return lambda _image: 0.0
    training = image_compressed_gb(cfg.image.base_image)
    built = run.outputs.get("imageUri")
    verl_jobs = {j.name for j in cfg.jobs if j.verl is not None and j.image is None}
    verl = {
        image
        for r in run.resources
        if r.type in TRAINING_KINDS and r.inputs["metadata"]["name"] in verl_jobs
        for image in images_of(r.inputs.get("spec"))
        if image != built
    }
    return lambda image: verl_image_compressed_gb() if image in verl else training


def preparations(cfg) -> dict[str, float]:
    """Each dataset preparation Job's minutes, by its Kubernetes name: pulling the training image
    onto a system node, then the preparation."""
    pull = (
        0.0 if cfg.image.builder == "kind" else image_pull_minutes(image_compressed_gb(cfg.image.base_image))
    )
    return {job_name(d.spec): pull + preparation_minutes(d.spec) for d in cfg.datasets}


def waits_for_data(cfg) -> dict[str, float]:
    """Minutes of the preparation each job (by name) waits for on the first `pulumi up`."""
    minutes = {d.name: m for d, m in zip(cfg.datasets, preparations(cfg).values(), strict=True)}
    return {j.name: minutes[j.dataset] for j in cfg.jobs if j.dataset in minutes}
