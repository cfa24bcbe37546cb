"""Kueue's clocks against the autoscaler's and the trainer's, and Kueue's one look for the
ProvisioningRequest API (at start-up: cmd/kueue/main.go), as a running stack meets them."""

from __future__ import annotations

import pytest
import yaml
from support.charts import render
from support.plans import plan, stack_values

from components.jobs.pods import RENDEZVOUS_JOIN_TIMEOUT_SECONDS
from components.queueing import PROVISIONING_ANNOTATION
from config import parse_config
from domain.catalog import image_compressed_gb, image_pull_minutes

RELEASE = "kubernetes:helm.sh/v3:Release"
CRD = "kubernetes:yaml/v2:ConfigGroup"


def minutes(duration: str) -> int:
    assert duration.endswith("m"), duration
    return int(duration.removesuffix("m"))


def kueue_config(run) -> dict:
    values = run.one(RELEASE, "kueue").inputs["values"]
    return yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])


@pytest.fixture(scope="module")
def without_autoscaler():
    return plan("prod", operators={"clusterAutoscaler": {"enabled": False}})


def test_kueue_waits_for_nodes_the_autoscaler_may_still_be_bringing(prod_plan):
    cfg = parse_config("prod", stack_values("prod"))
    waits = kueue_config(prod_plan)["waitForPodsReady"]
    pull = image_pull_minutes(image_compressed_gb(cfg.image.base_image))
    # AWS marks the request provisioned once the scale-up call succeeds: the nodes join later.
    assert minutes(waits["timeout"]) >= cfg.queueing.max_node_provision_minutes + pull
    assert (
        minutes(waits["timeout"])
        == cfg.queueing.max_node_provision_minutes + cfg.queueing.pods_ready_timeout_minutes
    )
    # A lost node: the survivors wait RENDEZVOUS_JOIN_TIMEOUT_SECONDS for the replacement.
    assert minutes(waits["recoveryTimeout"]) * 60 > RENDEZVOUS_JOIN_TIMEOUT_SECONDS


def test_without_the_autoscaler_the_nodes_exist_and_only_the_pods_are_waited_for(without_autoscaler):
    waits = kueue_config(without_autoscaler)["waitForPodsReady"]
    assert (waits["timeout"], minutes(waits["recoveryTimeout"]) * 60 > RENDEZVOUS_JOIN_TIMEOUT_SECONDS) == (
        "20m",
        True,
    )


def test_kueue_starts_after_the_provisioning_request_api_exists(prod_plan):
    crd = prod_plan.one(CRD, "queueing-provisioning-request-crd")
    assert crd.urn in prod_plan.one(RELEASE, "kueue").dependencies


def test_turning_the_autoscaler_on_rolls_kueue(prod_plan, without_autoscaler):
    """Kueue sets up its provisioning controller only if the API is there when it starts: the
    upgrade that turns the autoscaler on must restart it (a changed pod template rolls it)."""
    before = pod_spec_annotations(render(without_autoscaler, "kueue"))
    after = pod_spec_annotations(render(prod_plan, "kueue"))
    assert (before[PROVISIONING_ANNOTATION], after[PROVISIONING_ANNOTATION]) == ("disabled", "enabled")
    assert {k: v for k, v in before.items() if "checksum" not in k and k != PROVISIONING_ANNOTATION} == {
        k: v for k, v in after.items() if "checksum" not in k and k != PROVISIONING_ANNOTATION
    }


def pod_spec_annotations(objects: list[dict]) -> dict[str, str]:
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    return deployment["spec"]["template"]["metadata"]["annotations"]
