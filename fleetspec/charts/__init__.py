"""A stage after render: the Helm values fleetspec renders (the site's overlays merged in)
checked against the operator's charts on disk (``--charts DIR``), the way Helm checks them.
It reads the rendered Kubernetes layer, so it sits above render (docs/architecture.md).
"""
