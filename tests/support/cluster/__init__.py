"""A Kubernetes control plane, kwok nodes and the operators, all built from upstream source by
`make cluster-bins` (tools/cluster/), run as local processes for the tests in tests/cluster/."""
