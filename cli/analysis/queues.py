"""Where a job is in Kueue: admitted, provisioning, waiting (behind whom, or for what), evicted,
finished; from its Workload and the autoscaler's ProvisioningRequests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class QueueState:
    """Where a job is in Kueue: admitted, provisioning (quota held, nodes coming), waiting, evicted,
    finished; `failed` when it waits for something that will not come by itself."""

    state: str
    detail: str
    failed: bool = False
    fix: str = ""


def _conditions(obj: dict) -> dict[str, dict]:
    return {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}


def _true(conditions: dict[str, dict], kind: str) -> bool:
    return conditions.get(kind, {}).get("status") == "True"


def _owned_by(obj: dict, kind: str, name: str) -> bool:
    return any(
        r.get("kind") == kind and r.get("name") == name for r in obj["metadata"].get("ownerReferences", [])
    )


def _owner_name(obj: dict) -> str:
    refs = obj["metadata"].get("ownerReferences", [])
    return refs[0]["name"] if refs else obj["metadata"]["name"]


def queue_state(kind: str, name: str, workloads: list[dict], requests: list[dict]) -> QueueState:
    workload = next((w for w in workloads if _owned_by(w, kind, name)), None)
    if workload is None:
        return QueueState(
            "not queued",
            "Kueue has no Workload for it: Kueue is not running, or the job lacks its queue label",
            True,
            "kubectl -n kueue-system get pods; the stack labels every job (kueue.x-k8s.io/queue-name)",
        )
    cond = _conditions(workload)
    queue = workload["spec"].get("queueName", "?")
    if _true(cond, "Finished"):
        return QueueState("finished", cond["Finished"].get("message", ""))
    if _true(cond, "Admitted"):
        return QueueState("admitted", f"queue {queue}")
    if _true(cond, "Evicted"):
        why = cond["Evicted"]
        return QueueState(
            "evicted",
            f"{why.get('reason', '')}: {why.get('message', '')}".strip(": "),
            True,
            "its pods were not all Ready in time (queueing.podsReadyTimeoutMinutes): "
            "`trainstack doctor` shows why a pod waits; Kueue requeues it with a backoff",
        )
    if _true(cond, "QuotaReserved"):
        return _provisioning(workload, queue, requests)
    ahead = _ahead(workload, workloads)
    message = cond.get("QuotaReserved", {}).get("message") or "not yet considered by Kueue"
    if ahead:
        return QueueState("waiting", f"behind {', '.join(ahead)} in queue {queue}: {message}")
    return QueueState(
        "waiting",
        f"first in queue {queue}, not admitted: {message}",
        True,
        f"kubectl -n {workload['metadata'].get('namespace', 'training')} describe localqueue {queue} (its "
        "clusterQueue is the one to describe next: on a shared cluster it carries the stack's name, and an "
        "inactive one names what it lacks); kubectl -n kueue-system logs deploy/kueue-controller-manager",
    )


def _ahead(workload: dict, workloads: list[dict]) -> list[str]:
    """Jobs before it in its queue: holding quota, or waiting since earlier (first in, first out)."""
    queue, created = workload["spec"].get("queueName"), workload["metadata"].get("creationTimestamp", "")
    ahead = []
    for other in workloads:
        if other is workload or other["spec"].get("queueName") != queue:
            continue
        cond = _conditions(other)
        if _true(cond, "Finished"):
            continue
        holding = _true(cond, "QuotaReserved") or _true(cond, "Admitted")
        if holding or other["metadata"].get("creationTimestamp", "") < created:
            ahead.append(_owner_name(other) + (" (running)" if holding else " (waiting)"))
    return sorted(ahead)


def _provisioning(workload: dict, queue: str, requests: list[dict]) -> QueueState:
    """Quota reserved; the admission checks (the ProvisioningRequest) decide when it starts."""
    checks = workload.get("status", {}).get("admissionChecks", [])
    mine = [r for r in requests if _owned_by(r, "Workload", workload["metadata"]["name"])]
    request = max(mine, key=lambda r: r["metadata"].get("creationTimestamp", ""), default=None)
    said = []
    failed = False
    for check in checks:
        state = check.get("state", "Pending")
        said.append(f"{check['name']} {state}" + (f": {check['message']}" if check.get("message") else ""))
        failed |= state in ("Retry", "Rejected")
    if request is not None:
        cond = _conditions(request)
        if _true(cond, "Failed"):
            failed = True
            said.append(
                f"ProvisioningRequest {request['metadata']['name']} failed: {cond['Failed'].get('message', '')}"
            )
        elif "Provisioned" in cond:
            said.append(
                f"ProvisioningRequest {request['metadata']['name']}: {cond['Provisioned'].get('message', '')}"
            )
    detail = f"quota held in queue {queue}, nodes being provisioned" + (
        f"; {'; '.join(said)}" if said else ""
    )
    fix = (
        "the autoscaler could not get the nodes (capacity, quota, the AZ): "
        "kubectl -n kube-system logs deploy/cluster-autoscaler; another instance type, AZ or capacity "
        "reservation; Kueue retries the request with a backoff"
        if failed
        else ""
    )
    return QueueState("provisioning", detail, failed, fix)
