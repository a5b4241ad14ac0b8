"""Health on the controller: run the node check across the fleet, plan its verdicts, and
quarantine sick nodes through their owner (Slurm drain, Kubernetes cordon or device taints).

The node check itself, its fault catalog and classifier, and the in-cluster remediator ship
to nodes and live in ``fleetspec/node_side`` (standard library only, Python 3.8).
"""
