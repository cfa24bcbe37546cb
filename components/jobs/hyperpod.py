"""The HyperPod overlay: what a job's pods and manifest get on SageMaker HyperPod nodes, on top of
what every job gets (pods.py). Its placement says whether the job runs on HyperPod's nodes."""

from __future__ import annotations

from typing import Any

from config.jobs import HyperPodJobConfig
from conventions import (
    HYPERPOD_AUTO_RESUME_ANNOTATION,
    HYPERPOD_DEEP_HEALTH_LABEL,
    HYPERPOD_DEEP_HEALTH_PASSED,
    HYPERPOD_HEALTH_LABEL,
    HYPERPOD_MAX_RETRY_ANNOTATION,
    HYPERPOD_SCHEDULABLE,
)
from domain.placement import Placement


def on_hyperpod(placement: Placement) -> bool:
    return placement.hyperpod


def affinity(settings: HyperPodJobConfig) -> dict[str, Any]:
    """HyperPod's own job placement (sagemaker-hyperpod-cli's NODE_AFFINITY_DICT and
    DEEP_HEALTH_CHECK_PASSED_ONLY_NODE_AFFINITY_DICT, command_constants.py): nodes its health agents
    call Schedulable, and those that passed the deep health checks preferred (weight 100) or required."""

    def match(key: str, value: str) -> dict[str, Any]:
        return {"key": key, "operator": "In", "values": [value]}

    required = [match(HYPERPOD_HEALTH_LABEL, HYPERPOD_SCHEDULABLE)]
    deep = match(HYPERPOD_DEEP_HEALTH_LABEL, HYPERPOD_DEEP_HEALTH_PASSED)
    found: dict[str, Any] = {}
    if settings.deep_health_check == "required":
        required.append(deep)
    else:
        found["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": 100, "preference": {"matchExpressions": [deep]}}
        ]
    found["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [{"matchExpressions": required}]
    }
    return {"nodeAffinity": found}


def auto_resume_annotations(settings: HyperPodJobConfig) -> dict[str, str]:
    """HyperPod's auto-resume: after a node fault its job-auto-restart controller replaces the node
    and restarts the job, at most `maxRetries` times (the annotation keys and the rule that both
    come together: sagemaker-hyperpod-cli's command_constants.py and validators/job_validator.py)."""
    return {
        HYPERPOD_AUTO_RESUME_ANNOTATION: "true",
        HYPERPOD_MAX_RETRY_ANNOTATION: str(settings.max_retries),
    }
