"""Capacity reservations and Capacity Blocks a GPU group names: EC2 has them, of the right kind,
type, AZ and size, usable now. Pulumi has no data source for them; boto3 reads them with the
stack's region and profile."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from account_checks.report import Check, aws_error
from config import PROJECT, StackConfig


def reservation_checks(cfg: StackConfig, session: Callable[[], Any]) -> list[Check]:
    checks, ec2 = [], None  # one EC2 client for every group's reservation
    for i, g in enumerate(cfg.gpu_node_groups):
        if not g.capacity_reservation_id:
            continue
        key = f"{PROJECT}:gpuNodeGroups[{i}].capacityReservationId = {g.capacity_reservation_id}"
        block = g.capacity_type == "CAPACITY_BLOCK"
        needs = (
            f"{'a Capacity Block' if block else 'an On-Demand Capacity Reservation'} of "
            f"{g.node_count} x {g.instance_type} in {g.availability_zone}, active"
        )
        try:
            ec2 = ec2 or session().client("ec2")
            found = ec2.describe_capacity_reservations(CapacityReservationIds=[g.capacity_reservation_id])
            found = found["CapacityReservations"][0]
        except Exception as err:  # botocore's ClientError, NoCredentialsError, EndpointConnectionError...
            checks.append(
                Check(
                    f"reservation {g.capacity_reservation_id}",
                    needs,
                    "not readable",
                    f"{key}: EC2 could not read it ({aws_error(err)}); check the id and the region "
                    f"(aws ec2 describe-capacity-reservations --capacity-reservation-ids "
                    f"{g.capacity_reservation_id} --region {cfg.region})",
                )
            )
            continue
        checks.append(_reservation_check(g, key, needs, found, block))
    return checks


def _reservation_check(g, key: str, needs: str, r: dict[str, Any], block: bool) -> Check:
    kind = r.get("ReservationType", "default")
    end = r.get("EndDate")
    answer = (
        f"{kind} {r.get('State')}, {r.get('TotalInstanceCount')} x {r.get('InstanceType')} in "
        f"{r.get('AvailabilityZone')} ({r.get('AvailableInstanceCount')} unused)"
        + (f", ends {end:%Y-%m-%d %H:%M} UTC" if end else "")
    )
    wrong = []
    if (kind == "capacity-block") != block:
        wrong.append(
            f"it is {'a Capacity Block' if kind == 'capacity-block' else 'an On-Demand Capacity Reservation'}"
            f"; capacityType {g.capacity_type} needs {'a Capacity Block' if block else 'an On-Demand one'}"
        )
    if r.get("InstanceType") != g.instance_type:
        wrong.append(f"it holds {r.get('InstanceType')}, the group runs {g.instance_type}")
    if r.get("AvailabilityZone") != g.availability_zone:
        wrong.append(
            f"it is in {r.get('AvailabilityZone')}, the group's availabilityZone is {g.availability_zone}"
        )
    # Counted by size, not by what is unused: the group's own nodes use it on every later run.
    if (r.get("TotalInstanceCount") or 0) < g.node_count:
        wrong.append(f"it holds {r.get('TotalInstanceCount')} instances, the group needs {g.node_count}")
    usable = ("active", "scheduled") if block else ("active",)
    now = datetime.datetime.now(datetime.UTC)
    if r.get("State") not in usable:
        wrong.append(f"its state is {r.get('State')} (needs {' or '.join(usable)})")
    elif end and end <= now:
        wrong.append(f"it ended {end:%Y-%m-%d %H:%M} UTC")
    problem = f"{key}: {'; '.join(wrong)}" if wrong else None
    return Check(f"reservation {g.capacity_reservation_id}", needs, answer, problem)
