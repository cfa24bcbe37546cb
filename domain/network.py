"""Where the stack's private AWS resources go (MLflow's database, the CI runner's builds): the
cluster's VPC, its private subnets and the security group its nodes share. The values are strings,
or a Pulumi program's outputs of strings (`PrivateNetwork[pulumi.Input[str]]`): the shape is the
components', whoever makes the network."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

Id = TypeVar("Id")


@dataclass(frozen=True)
class PrivateNetwork(Generic[Id]):
    vpc_id: Id
    private_subnet_ids: list[Id]
    cluster_security_group_id: Id
