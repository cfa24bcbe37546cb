"""The planes, one module per plane of the architecture diagram (docs/architecture.md); the stacks
(stacks/) compose them, one composition per target."""
