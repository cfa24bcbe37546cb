"""A Kubernetes control plane and kwok nodes, built from upstream source by
`make cluster-bins` (tools/cluster/), run as local processes for the tests in tests/cluster/."""
