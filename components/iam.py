"""IAM policy documents shared by the components."""

from __future__ import annotations


def service_trust(service: str, actions: tuple[str, ...] = ("sts:AssumeRole",)) -> dict:
    """Trust policy letting an AWS service principal assume a role."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": service},
                "Action": actions[0] if len(actions) == 1 else list(actions),
            }
        ],
    }
