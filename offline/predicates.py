"""Kubernetes' scheduling predicates, as kube-scheduler and the DaemonSet controller apply them, over
plain manifests (dicts): resource quantities, a pod's requests, node selectors, required node
affinity, taints and tolerations.

Units follow the Kueue model (offline/scheduling.py, domain/quota.py): cpu in millicores, memory in
GiB, extended resources in units. Sources: k8s.io/component-helpers `scheduling/corev1`
(`FindMatchingUntoleratedTaint`, `ToleratesTaint`), `scheduling/corev1/nodeaffinity`
(`nodeSelectorRequirementsAsSelector`), k8s.io/kubernetes `pkg/api/v1/resource` (`PodRequests`) and
`pkg/controller/daemon/util` (`AddOrUpdateDaemonPodTolerations`).
"""

from __future__ import annotations

from typing import Any

Amounts = dict[str, Any]  # resource -> amount (cpu millicores, memory GiB, others units)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}


def _whole(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def quantity(name: str, value: Any) -> int | float:
    """A Kubernetes quantity ("500m", "3Gi", "8", 2) in the model's unit for resource `name`."""
    text = str(value).strip()
    for suffix, factor in _BINARY.items():
        if text.endswith(suffix):
            number = float(text.removesuffix(suffix)) * factor
            break
    else:
        suffix = text[-1:] if text[-1:] in _DECIMAL and not text[-1:].isdigit() else ""
        number = float(text.removesuffix(suffix) if suffix else text) * _DECIMAL.get(suffix, 1)
    if name == "cpu":
        return _whole(round(number * 1000, 3))
    if name == "memory":
        return _whole(number / 2**30)
    return _whole(number)


def _container_requests(container: dict) -> Amounts:
    resources = container.get("resources") or {}
    # A limit without a request is also the request (the API server defaults it so).
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    found = {**requests, **{k: v for k, v in limits.items() if k not in requests}}
    return {k: quantity(k, v) for k, v in found.items()}


def add(a: Amounts, b: Amounts) -> Amounts:
    return {k: _whole(a.get(k, 0) + b.get(k, 0)) for k in dict.fromkeys([*a, *b])}


def pod_requests(spec: dict) -> Amounts:
    """What the scheduler counts for a pod: its containers' requests summed, at least its largest
    init container's (restartable sidecar init containers run beside the rest), plus overhead."""
    total: Amounts = {}
    for c in spec.get("containers") or []:
        total = add(total, _container_requests(c))
    sidecars: Amounts = {}
    for c in spec.get("initContainers") or []:
        own = _container_requests(c)
        if c.get("restartPolicy") == "Always":
            sidecars = add(sidecars, own)
            total = add(total, own)
        else:
            peak = add(own, sidecars)
            total = {k: max(total.get(k, 0), peak.get(k, 0)) for k in dict.fromkeys([*total, *peak])}
    return add(total, {k: quantity(k, v) for k, v in (spec.get("overhead") or {}).items()})


# --- node selection ------------------------------------------------------------------------------


def _requirement(expr: dict, labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt"):
        try:
            have, want = int(labels[key]), int(values[0])
        except (KeyError, ValueError, IndexError):
            return False
        return have > want if op == "Gt" else have < want
    return False


def unmatched_selector(spec: dict, labels: dict[str, str]) -> str | None:
    """Why the pod's nodeSelector does not match a node with `labels` (None when it does)."""
    for key, value in sorted((spec.get("nodeSelector") or {}).items()):  # the plan's order varies
        if labels.get(key) != value:
            return f"nodeSelector {key}={value}"
    return None


def unmatched_affinity(spec: dict, labels: dict[str, str], keys: set[str] | None = None) -> str | None:
    """Why the pod's required node affinity does not match (None when it does). Terms are ORed, a
    term's expressions ANDed; a term with no expressions matches nothing. `keys`: compare only these
    label keys (Kueue's flavor assigner looks at the flavor's keys alone)."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return None
    terms = required.get("nodeSelectorTerms") or []
    failed = []
    for term in terms:
        exprs = term.get("matchExpressions") or []
        if keys is not None:
            exprs = [e for e in exprs if e["key"] in keys]
            if not exprs:
                return None
        elif not exprs and not term.get("matchFields"):
            continue
        bad = [e for e in exprs if not _requirement(e, labels)]
        if not bad:
            return None
        e = bad[0]
        failed.append(f"{e['key']} {e['operator']} {e.get('values', [])}"[:120])
    return "node affinity " + (failed[0] if failed else "with no terms")


def tolerates(toleration: dict, taint: dict) -> bool:
    """corev1 ToleratesTaint: an empty effect matches every effect; an empty key with Exists
    matches every taint; Equal (the default) compares values."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    return op == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def untolerated_taint(tolerations: list[dict], taints: list[dict]) -> dict | None:
    """The first NoSchedule/NoExecute taint no toleration tolerates (PreferNoSchedule never filters)."""
    for taint in taints:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not any(
            tolerates(t, taint) for t in tolerations
        ):
            return taint
    return None


def taint_text(taint: dict) -> str:
    value = f"={taint['value']}" if taint.get("value") else ""
    return f"{taint['key']}{value}:{taint['effect']}"


# The DaemonSet controller adds these to every daemon pod, and nothing else.
DAEMON_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]
HOST_NETWORK_TOLERATION = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}


def daemon_tolerations(spec: dict) -> list[dict]:
    extra = [*DAEMON_TOLERATIONS, *([HOST_NETWORK_TOLERATION] if spec.get("hostNetwork") else [])]
    return [*(spec.get("tolerations") or []), *extra]


def placement_problem(
    spec: dict, labels: dict[str, str], taints: list[dict], daemon: bool = False
) -> str | None:
    """Why a pod with `spec` cannot be placed on a node with `labels` and `taints`, resources aside
    (None when it can): nodeSelector, required node affinity, then taints."""
    problem = unmatched_selector(spec, labels) or unmatched_affinity(spec, labels)
    if problem:
        return f"{problem} does not match"
    tolerations = daemon_tolerations(spec) if daemon else spec.get("tolerations") or []
    taint = untolerated_taint(tolerations, taints)
    if taint:
        return f"does not tolerate {taint_text(taint)}"
    return None
