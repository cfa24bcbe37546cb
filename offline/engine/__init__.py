"""The offline engine: the unchanged Pulumi program run under Pulumi's mock engine, recorded.

recording.py holds what a run records (`Registration`, `PlanRun`); pulumi_wire.py is the one module
on Pulumi's private APIs (the wire format, the recording monitor, the runtime's state); aws_answers.py
answers resources and invokes the way AWS and its providers do, in tables by token, next to the
account's own answers in offline/simulated_account.py; pulumi_eks.py emulates what pulumi-eks creates inside
its components; mocks.py routes Pulumi's questions to those tables; runner.py runs a program and
owns its event loops. The names below are what the plan, the tests and the benchmarks use.
"""

from offline.engine.aws_answers import ACCOUNT_ID, OFFLINE_CALLER_ARN
from offline.engine.mocks import OfflineMocks
from offline.engine.pulumi_eks import EKS_CLUSTER_SECURITY_GROUP, ProviderRefusal
from offline.engine.recording import SECRET_MASK, UNKNOWN_MASK, PlanRun, Registration
from offline.engine.runner import close_event_loops, freeze_what_full_collections_keep, run_program

__all__ = [
    "ACCOUNT_ID",
    "EKS_CLUSTER_SECURITY_GROUP",
    "OFFLINE_CALLER_ARN",
    "SECRET_MASK",
    "UNKNOWN_MASK",
    "OfflineMocks",
    "PlanRun",
    "ProviderRefusal",
    "Registration",
    "close_event_loops",
    "freeze_what_full_collections_keep",
    "run_program",
]
