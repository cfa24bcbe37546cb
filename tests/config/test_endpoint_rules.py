"""The EKS API endpoint is never open to the whole internet by default: a public endpoint needs
the networks that may reach it, and `0.0.0.0/0` is refused, each naming the key.

Fails until config/cluster.py takes the change in the CI/endpoint report of issue #37."""

from __future__ import annotations

import pytest
from support.plans import plan

from config.schema import ConfigError


def test_a_public_endpoint_without_cidrs_is_refused():
    with pytest.raises(ConfigError) as err:
        plan("dev", cluster={"endpointPublicAccess": True})
    message = str(err.value)
    assert (
        "trainstack:cluster.publicAccessCidrs = []: a public endpoint needs the networks allowed to reach it"
        in (message)
    )
    assert "endpointPublicAccess: false" in message


def test_the_whole_internet_is_refused():
    with pytest.raises(ConfigError) as err:
        plan("dev", cluster={"publicAccessCidrs": ["198.51.100.7/32", "0.0.0.0/0"]})
    assert (
        'trainstack:cluster.publicAccessCidrs[1] = "0.0.0.0/0": opens the cluster API to the whole internet'
        in (str(err.value))
    )


def test_a_private_endpoint_needs_no_cidrs():
    run = plan("dev", cluster={"endpointPublicAccess": False})
    inputs = run.one("eks:index:Cluster").inputs
    assert inputs["endpointPublicAccess"] is False and inputs["endpointPrivateAccess"] is True


def test_the_dev_template_plans_with_an_explicit_cidr():
    inputs = plan("dev").one("eks:index:Cluster").inputs
    assert inputs["publicAccessCidrs"] and "0.0.0.0/0" not in inputs["publicAccessCidrs"]
