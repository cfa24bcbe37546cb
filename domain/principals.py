"""IAM principal ARNs as EKS sees them: a caller's session maps to the role behind it."""

from __future__ import annotations


def role_of_principal(arn: str) -> str:
    """The IAM role or user ARN behind a caller ARN. An assumed-role session maps to its role, as
    EKS does for the cluster creator's access entry; a session ARN carries no role path."""
    parts = arn.split(":", 5)
    if len(parts) == 6 and parts[2] == "sts" and parts[5].startswith("assumed-role/"):
        role = parts[5].split("/")[1]
        return f"arn:{parts[1]}:iam::{parts[4]}:role/{role}"
    return arn


def same_principal(a: str, b: str) -> bool:
    """Whether two IAM ARNs name one principal: same account, kind and name, whatever the path."""

    def key(arn: str) -> tuple[str, ...]:
        parts = role_of_principal(arn).split(":", 5)
        if len(parts) < 6:
            return (arn,)
        kind, _, rest = parts[5].partition("/")
        return (parts[4], kind, rest.rsplit("/", 1)[-1])

    return key(a) == key(b)
