"""The one kind of failure `trainstack` reports to a user: a line saying what is wrong and what to do."""

from __future__ import annotations

EXIT_FAILED = 1  # the command ran and found a problem (a failed job, an unreachable cluster)
EXIT_USAGE = 2  # the input was wrong (a missing file, an unknown job, a bad option)


class CliError(Exception):
    """Bad input or an unusable environment: one line for the user, and the exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code
