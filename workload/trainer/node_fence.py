"""Fences a hung GPU node so the gang it holds restarts elsewhere in minutes, not half an hour.

A node whose kernel or driver hangs keeps its Node object: the node lifecycle controller marks it
NotReady and taint-based eviction gives its pods a deletion timestamp, but no kubelet confirms their
end, so they stay Terminating. A TrainJob's JobSet deletes its Jobs in the foreground and the Job
controller replaces a pod only once it has failed (podReplacementPolicy Failed, the runtime's pod
failure policy), so the whole gang waits for that pod. Kubernetes' pod GC force-deletes it only when
the node also carries `node.kubernetes.io/out-of-service` (kubernetes v1.36 pkg/controller/podgc
gc_controller.go gcTerminating: the node not Ready and the taint's key present), which the
non-graceful node shutdown design leaves to whoever knows the node is really down. EKS node repair
replaces a NotReady node after 30 minutes.

This controller is that someone, for the stack's GPU nodes on a cluster it created. Each round:
  - a GPU node not Ready for `--after` seconds that holds a pod stuck Terminating is hung;
  - past a share of the GPU nodes down at once (`--max-share`, at least one node) it fences none and
    says so: a fault that wide (the network, the control plane) is a person's to look at;
  - a hung node's instance is stopped by its own group's mechanism: the Auto Scaling group
    terminates it and starts its replacement (TerminateInstanceInAutoScalingGroup, the desired
    capacity kept);
  - once EC2 reports the instance shutting down or gone, and not before (the taint's contract: the
    node is down; an EKS managed group's termination hook drains the node first, which a hung node
    times out), the node is tainted out-of-service, annotated with why, and an Event on the node
    says so. Pod
    GC then deletes its pods, the Job fails them, and JobSet restarts the gang on other nodes.
A node that is not in an Auto Scaling group (HyperPod's, a self-managed one) is left alone and named.

The API server is read with the pod's service account (trainer.kube_api); AWS through boto3 with the
pod's credentials.

    python -m trainer.node_fence --nodes trainstack.dev/role=gpu --after 180
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from trainer import kube_api

OUT_OF_SERVICE = "node.kubernetes.io/out-of-service"
# The value the Kubernetes docs give the taint for a node that was shut down.
OUT_OF_SERVICE_TAINT = {"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}
FENCED_ANNOTATION = "trainstack.dev/fenced"
STOPPED_STATES = ("shutting-down", "terminated", "stopping", "stopped")
EVENT_REASON = "TrainstackNodeFenced"

log = logging.getLogger("node_fence")


@dataclass(frozen=True)
class Policy:
    after_seconds: float
    max_share: float


@dataclass(frozen=True)
class Hung:
    node: str
    instance_id: str | None  # from spec.providerID (aws:///<zone>/<id>)
    down_seconds: float
    stuck_pods: tuple[str, ...]  # namespace/name


def not_ready_since(node: dict) -> datetime | None:
    """When the node's Ready condition left True; None while it is Ready."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            if c.get("status") == "True":
                return None
            return datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00"))
    return None


def instance_id(node: dict) -> str | None:
    provider_id = (node.get("spec") or {}).get("providerID") or ""
    if not provider_id.startswith("aws://"):
        return None
    return provider_id.rsplit("/", 1)[-1] or None


def fenced(node: dict) -> bool:
    return any(t.get("key") == OUT_OF_SERVICE for t in (node.get("spec") or {}).get("taints") or [])


def hung_nodes(
    nodes: list[dict], pods: list[dict], now: datetime, policy: Policy
) -> tuple[list[Hung], str | None]:
    """The nodes to fence now, or none and the sentence that says why the breaker held them."""
    down = {n["metadata"]["name"]: since for n in nodes if (since := not_ready_since(n)) is not None}
    limit = max(1, int(len(nodes) * policy.max_share))
    if len(down) > limit:
        return [], (
            f"{len(down)} of {len(nodes)} GPU nodes are not Ready (the most fenced at once is {limit}): "
            "a fault this wide is the network's or the control plane's, so no node is fenced; "
            "look at the nodes' conditions and the cluster's events"
        )
    stuck: dict[str, list[str]] = {}
    for p in pods:
        meta = p["metadata"]
        where = (p.get("spec") or {}).get("nodeName")
        if meta.get("deletionTimestamp") and where in down:
            stuck.setdefault(where, []).append(f"{meta['namespace']}/{meta['name']}")
    found = []
    for n in nodes:
        name = n["metadata"]["name"]
        if name not in down or name not in stuck or fenced(n):
            continue
        seconds = (now - down[name]).total_seconds()
        if seconds >= policy.after_seconds:
            found.append(Hung(name, instance_id(n), seconds, tuple(sorted(stuck[name]))))
    return found, None


class Kubernetes(kube_api.Kubernetes):
    def taint(self, node: dict, why: str) -> None:
        """Adds the out-of-service taint and the annotation."""
        taints = [*(node["spec"].get("taints") or []), OUT_OF_SERVICE_TAINT]
        annotations = {**(node["metadata"].get("annotations") or {}), FENCED_ANNOTATION: why}
        self.patch_node(
            node,
            [
                {"op": "add", "path": "/spec/taints", "value": taints},
                {"op": "add", "path": "/metadata/annotations", "value": annotations},
            ],
        )

    def event(self, node: dict, message: str) -> None:
        self.node_event(node, EVENT_REASON, message, "trainstack-node-fence")


class Instances:
    """The node's instance and its Auto Scaling group, through boto3."""

    def __init__(self, session=None):
        import boto3

        session = session or boto3.session.Session()
        self.autoscaling = session.client("autoscaling")
        self.ec2 = session.client("ec2")

    def group_of(self, instance: str) -> tuple[str, str] | None:
        """The instance's Auto Scaling group and its lifecycle state there (InService,
        Terminating:Wait while a termination hook drains it, ...); None outside any group."""
        found = self.autoscaling.describe_auto_scaling_instances(InstanceIds=[instance])[
            "AutoScalingInstances"
        ]
        return (found[0]["AutoScalingGroupName"], found[0]["LifecycleState"]) if found else None

    def state(self, instance: str) -> str:
        """EC2's state of the instance; "terminated" once EC2 no longer knows it."""
        from botocore.exceptions import ClientError

        try:
            reservations = self.ec2.describe_instances(InstanceIds=[instance])["Reservations"]
        except ClientError as err:
            if err.response["Error"]["Code"] == "InvalidInstanceID.NotFound":
                return "terminated"
            raise
        return reservations[0]["Instances"][0]["State"]["Name"] if reservations else "terminated"

    def replace(self, instance: str) -> None:
        self.autoscaling.terminate_instance_in_auto_scaling_group(
            InstanceId=instance, ShouldDecrementDesiredCapacity=False
        )


def fence(kube: Kubernetes, instances: Instances, node: dict, hung: Hung) -> str:
    """One hung node: its instance replaced by its group, then the taint once EC2 says it is down.
    Answers what was done, in a sentence."""
    if hung.instance_id is None:
        return f"node {hung.node} is hung but names no EC2 instance (providerID): left as it is"
    state = instances.state(hung.instance_id)
    if state not in STOPPED_STATES:
        found = instances.group_of(hung.instance_id)
        if found is None:
            return (
                f"node {hung.node} ({hung.instance_id}) is hung but in no Auto Scaling group: left to its "
                "owner; its pods stay Terminating until the node is repaired or deleted"
            )
        group, lifecycle = found
        # Asked once: an EKS managed group's termination hook drains the node first, and EC2
        # reports the instance running until the hook ends.
        if not lifecycle.startswith("Terminating"):
            instances.replace(hung.instance_id)
        state = instances.state(hung.instance_id)
        if state not in STOPPED_STATES:
            return f"node {hung.node}: {group} is replacing {hung.instance_id} (now {state}); tainted once it is down"
    why = (
        f"not Ready {hung.down_seconds:.0f} s with {len(hung.stuck_pods)} pod(s) stuck Terminating "
        f"({', '.join(hung.stuck_pods)}); instance {hung.instance_id} {state}"
    )
    kube.taint(node, why)
    message = f"fenced: {why}; pod GC deletes its pods and their jobs restart on other nodes"
    kube.event(node, message)
    return f"node {hung.node} {message}"


def fence_round(kube: Kubernetes, instances: Instances, selector: str, policy: Policy) -> list[str]:
    nodes = kube.nodes(selector)
    down = [n for n in nodes if not_ready_since(n) is not None and not fenced(n)]
    pods = [p for n in down for p in kube.pods_on(n["metadata"]["name"])]
    hung, held = hung_nodes(nodes, pods, datetime.now(UTC), policy)
    if held:
        return [held]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    return [fence(kube, instances, by_name[h.node], h) for h in hung]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trainer.node_fence", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", required=True, help="label selector of the GPU nodes to watch")
    parser.add_argument("--after", type=float, required=True, help="seconds not Ready before a node is hung")
    parser.add_argument("--max-share", type=float, default=0.2, help="most of the nodes fenced at once")
    parser.add_argument("--interval", type=float, default=15.0, help="seconds between rounds")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stdout)
    policy = Policy(args.after, args.max_share)
    kube, instances = Kubernetes(), Instances()
    said: set[str] = set()
    while True:
        try:
            for line in fence_round(kube, instances, args.nodes, policy):
                if line not in said:  # a held breaker or a waiting replacement, said once
                    log.info(line)
                    said.add(line)
        except Exception as err:  # the next round reads everything again
            log.warning("round failed: %s", err)
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
