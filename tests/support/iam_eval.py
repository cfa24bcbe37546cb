"""A small IAM policy evaluator for the condition operators trainstack's policies use.

moto (5.2.5) does not model what these policies rely on: `moto/iam/policy_conditions.py` knows
`StringEquals` only and ignores every other operator (`TrustCondition.verify_condition` returns
True for an unknown one), skips a condition key absent from the request instead of failing it, and
`moto/iam/access_control.py` (`IAMPolicyStatement`) reads neither `NotResource` nor permissions
boundaries. This follows AWS's documented evaluation logic instead: an explicit deny in any policy
wins; otherwise the request is allowed only when an identity policy allows it and, with a
permissions boundary, the boundary allows it too; a resource policy (a bucket's) in the same account
adds its allows for the principals it names and its denies for every principal it matches. Within
a condition block every operator and
every key must match, and any one of a key's values; a key absent from the request fails every
operator but the negated ones (`StringNotEquals` then matches) and `Null`. An operator this module
does not know raises rather than passing.

Case, as AWS has it ("IAM JSON policy elements: Condition", "Tag keys" in IAM's tagging guide):
condition key names are case-insensitive, the tag key in `aws:RequestTag/`, `aws:ResourceTag/` and
`aws:PrincipalTag/` included, so a request context's key is found whatever its case; the values a
multivalued key such as `aws:TagKeys` carries keep the case they were sent in, and `StringEquals`
compares values case-sensitively where `StringEqualsIgnoreCase` does not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

Context = dict[str, "str | list[str]"]


@dataclass(frozen=True)
class Request:
    action: str
    resource: str
    context: Context = field(default_factory=dict)


def _wildcard(pattern: str, value: str, *, ignore_case: bool) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.IGNORECASE if ignore_case else 0) is not None


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _matches(statement: dict, key: str, not_key: str, value: str, *, ignore_case: bool) -> bool:
    if key in statement:
        return any(_wildcard(p, value, ignore_case=ignore_case) for p in _listed(statement[key]))
    return not any(_wildcard(p, value, ignore_case=ignore_case) for p in _listed(statement[not_key]))


def _arn_like(pattern: str, value: str) -> bool:
    """ARN operators compare each of the six colon-separated parts with wildcards, so `*` never
    spans a colon."""
    want, got = pattern.split(":", 5), value.split(":", 5)
    return len(want) == len(got) == 6 and all(
        _wildcard(p, v, ignore_case=False) for p, v in zip(want, got, strict=True)
    )


def _operator(op: str, expected: list[str], actual: str | list[str] | None) -> bool:
    if op in ("ArnLike", "ArnEquals", "ArnNotLike", "ArnNotEquals"):
        if actual is None:
            return "Not" in op
        if isinstance(actual, list):
            raise ValueError(f"{op} on a multivalued key: use ForAnyValue/ForAllValues")
        return any(_arn_like(e, actual) for e in expected) != ("Not" in op)
    if op == "Bool":
        return actual is not None and actual in expected
    if op == "Null":
        (want_absent,) = expected
        return (actual is None) == (want_absent == "true")
    if op == "ForAnyValue:StringEquals":
        return actual is not None and any(a in expected for a in _listed(actual))
    if op == "ForAnyValue:StringEqualsIgnoreCase":
        wanted = {e.lower() for e in expected}
        return actual is not None and any(a.lower() in wanted for a in _listed(actual))
    if op in ("StringEquals", "StringLike", "StringNotEquals"):
        if actual is None:
            return op == "StringNotEquals"
        if isinstance(actual, list):
            raise ValueError(f"{op} on a multivalued key: use ForAnyValue/ForAllValues")
        if op == "StringLike":
            return any(_wildcard(e, actual, ignore_case=False) for e in expected)
        return (actual in expected) == (op == "StringEquals")
    raise ValueError(f"condition operator {op!r} is not modelled")


def _lookup(context: Context, key: str) -> str | list[str] | None:
    """The context's value for a condition key, its name compared without case."""
    return next((v for k, v in context.items() if k.lower() == key.lower()), None)


def condition_holds(condition: dict, context: Context) -> bool:
    return all(
        _operator(op, _listed(expected), _lookup(context, key))
        for op, keys in condition.items()
        for key, expected in keys.items()
    )


def applies(statement: dict, request: Request) -> bool:
    return (
        _principal_matches(statement, _lookup(request.context, "aws:PrincipalArn"))
        and _matches(statement, "Action", "NotAction", request.action, ignore_case=True)
        and _matches(statement, "Resource", "NotResource", request.resource, ignore_case=False)
        and condition_holds(statement.get("Condition", {}), request.context)
    )


def _principal_matches(statement: dict, principal: str | list[str] | None) -> bool:
    """An identity policy has no Principal; a resource policy's `*` or `{"AWS": ...}` names it."""
    named = statement.get("Principal")
    if named is None or named == "*":
        return True
    arns = _listed(named.get("AWS", []))
    return isinstance(principal, str) and any(a == "*" or a == principal for a in arns)


def _effects(policy: dict, request: Request) -> set[str]:
    return {s["Effect"] for s in _listed_statements(policy) if applies(s, request)}


def _listed_statements(policy: dict) -> list[dict]:
    statements = policy["Statement"]
    return [statements] if isinstance(statements, dict) else statements


def decide(
    identity: list[dict], request: Request, boundary: dict | None = None, resource: dict | None = None
) -> str:
    """ "deny" (explicit), "allow", or "implicit" (nothing allows it). `resource`: the policy of the
    resource in the principal's own account (a bucket's), whose allow of a role counts within the
    role's boundary."""
    policies = identity + [p for p in (boundary, resource) if p]
    if any("Deny" in _effects(p, request) for p in policies):
        return "deny"
    allowed = any("Allow" in _effects(p, request) for p in identity) or (
        resource is not None and "Allow" in _effects(resource, request)
    )
    if boundary is not None:
        allowed = allowed and "Allow" in _effects(boundary, request)
    return "allow" if allowed else "implicit"


def trusts(trust: dict, context: Context) -> bool:
    """Whether a role's trust policy lets a web-identity token with these claims assume it."""
    request = Request("sts:AssumeRoleWithWebIdentity", "*", context)
    statements = _listed_statements(trust)
    if any(s["Effect"] == "Deny" and _trust_applies(s, request) for s in statements):
        return False
    return any(s["Effect"] == "Allow" and _trust_applies(s, request) for s in statements)


def _trust_applies(statement: dict, request: Request) -> bool:
    return _matches(statement, "Action", "NotAction", request.action, ignore_case=True) and condition_holds(
        statement.get("Condition", {}), request.context
    )
