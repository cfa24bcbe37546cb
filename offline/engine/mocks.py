"""The mocks the offline engine installs: Pulumi's two questions routed to the answer tables.

`OfflineMocks` answers a resource registration from aws_answers' tables by type token (pulumi-eks's
components from pulumi_eks.py), and an invoke from the account's table (offline/simulated_account.py: a read
of something missing fails the invoke, as AWS answers), then aws_answers' and pulumi-eks's. A
project component (`trainstack:...`) gets no outputs: the program computes them. An invoke no table
answers stops the run and names where to add its answer.
"""

from __future__ import annotations

from typing import Any

from pulumi.runtime import MockCallArgs, MockResourceArgs, Mocks

from config import PROJECT
from offline.engine.aws_answers import (
    OFFLINE_CALLER_ARN,
    RESOURCES,
    NewResource,
    OfflineAws,
    answer_for,
    physical_id,
)
from offline.engine.pulumi_eks import PulumiEks
from offline.engine.recording import RemoteChild
from offline.simulated_account import OfflineAccount


class OfflineMocks(Mocks):
    """Answers registrations and invokes the way AWS and the providers would, offline."""

    def __init__(
        self, region: str, caller_arn: str = OFFLINE_CALLER_ARN, account: OfflineAccount | None = None
    ):
        self.region = region
        self.caller_arn = caller_arn
        self.account = account or OfflineAccount(region)
        self.aws = OfflineAws(region, caller_arn, self.account)
        self.eks = PulumiEks(self.aws)
        self.account_invokes = self.account.invokes()
        self.invoke_answers = {**self.aws.invokes(), **self.eks.calls()}
        self.resource_answers = {**RESOURCES, **self.eks.resources()}

    def take_children(self, type_: str, name: str) -> list[RemoteChild]:
        return self.eks.take_children(type_, name)

    def new_resource(self, args: MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if not args.custom and args.typ.startswith(f"{PROJECT}:"):
            return None, {}
        created = NewResource.of(args.typ, args.name, args.inputs, self.region)
        created.state.update(answer_for(args.typ, self.resource_answers)(created))
        return physical_id(created), created.state

    def call(self, args: MockCallArgs):
        token, call_args = args.token, args.args
        account_read = self.account_invokes.get(token)
        if account_read is not None:
            try:
                return account_read(call_args)
            except LookupError as err:  # what AWS answers for a missing thing: the invoke fails
                return {}, [("", str(err))]
        answer = self.invoke_answers.get(token)
        if answer is not None:
            return answer(call_args)
        raise NotImplementedError(
            f"the offline plan has no answer for invoke {token}; add one to offline/engine/aws_answers.py "
            "(OfflineAws.invokes)"
        )
