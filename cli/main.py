"""`trainstack`: is my job training, how fast, why is it pending, is EFA in use, what did rank 7 say.

    trainstack status                      # jobs and node groups; exit 1 if something failed
    trainstack logs JOB [--follow] [--rank N] [--since 10m] [--tail 100]
    trainstack doctor                      # the checks an EKS training engineer runs, with fixes
    trainstack metrics JOB [--plot curve.png]
    trainstack estimate JOB --tokens 1e11 [--efficiency 0.9]

It reads the stack's outputs (`pulumi stack output --json --show-secrets`, or `--outputs FILE`)
for the cluster's kubeconfig, the namespace, the jobs and the node groups; `--kubeconfig` and
`--namespace` point it anywhere. `--json` prints machine-readable output on every command.

The command line is in `cli/parser.py`; each command in `cli/commands/` (it fetches, then renders);
the stack's outputs and the cluster they lead to in `cli/stack.py`.
"""

from __future__ import annotations

import sys
import traceback

from cli.commands import doctor, estimate, logs, metrics, status
from cli.errors import EXIT_FAILED, CliError
from cli.output import Output
from cli.parser import parser

COMMANDS = {
    "status": status.run,
    "logs": logs.run,
    "doctor": doctor.run,
    "metrics": metrics.run,
    "estimate": estimate.run,
}


def main(argv: list[str] | None = None) -> int:
    args = parser(__doc__.split("\n\n")[0]).parse_args(argv)
    try:
        return COMMANDS[args.command](args, Output(args.json))
    except CliError as err:
        print(f"trainstack {args.command}: error: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # a bug or a case no check foresaw: still one line, unless --debug
        if args.debug:
            traceback.print_exc()
        else:
            print(
                f"trainstack {args.command}: error: unexpected {type(err).__name__}: {_first_line(err)} "
                "(run again with --debug for the traceback, and report it)",
                file=sys.stderr,
            )
        return EXIT_FAILED


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [""])[0][:300]


if __name__ == "__main__":
    sys.exit(main())
