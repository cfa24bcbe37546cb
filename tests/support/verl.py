"""The node groups and the GRPO job the VERL tests and the VERL job rules share."""

from __future__ import annotations

L4 = {"name": "gpu", "instanceType": "g6.xlarge", "nodeCount": 2}
P5 = {"name": "p5", "instanceType": "p5.48xlarge", "nodeCount": 2, "efa": True}
GRPO = {"name": "grpo", "kind": "RayJob", "nodeGroup": "gpu", "nodes": 2, "wait": "none", "verl": {}}
