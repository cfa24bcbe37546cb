"""One module per `trainstack` command. Each `run(args, out)` first fetches what it needs (the
stack's outputs, the cluster's objects, MLflow), then renders it (a table, or JSON with --json) and
returns the exit code."""
