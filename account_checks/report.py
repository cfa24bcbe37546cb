"""The check framework: one Check per thing the stack needs (what it needs, what the account or
this machine answered, the problem if any); the report `pulumi preview` and the offline plan print;
the error that stops the program with every problem found."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from config import StackConfig


@dataclass(frozen=True)
class Check:
    name: str
    needs: str
    answer: str
    problem: str | None = None  # the sentence that stops the program, with its fix


class AccountCheckError(pulumi.RunError):
    def __init__(self, stack: str, problems: list[str]):
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(
            f"stack '{stack}': the AWS account or this machine is not ready; nothing was created:\n{lines}"
        )


def report(cfg: StackConfig, account_id: str, checks: tuple[Check, ...]) -> str:
    lines = [f"Account checks ({cfg.region}, account {account_id}):"]
    for c in checks:
        lines.append(f"  {'FAIL' if c.problem else 'ok':4s}  {c.name}: needs {c.needs}; found {c.answer}")
    return "\n".join(lines)


def conclude(cfg: StackConfig, account_id: str, checks: list[Check]) -> None:
    """Log the report; stop with every problem found, before anything is created."""
    done = tuple(checks)
    pulumi.log.info(report(cfg, account_id, done))
    problems = [c.problem for c in done if c.problem]
    if problems:
        raise AccountCheckError(cfg.stack, problems)


def aws_error(err: Exception) -> str:
    """A boto3 failure as a problem quotes it: AWS's code and message, else the exception."""
    response = getattr(err, "response", None)
    if isinstance(response, dict) and "Error" in response:
        e = response["Error"]
        return f"{e.get('Code')}: {e.get('Message')}"
    return f"{type(err).__name__}: {err}"
