"""`trainstack`: watch and diagnose what a trainstack stack runs (status, logs, doctor, metrics, estimate)."""
