"""Health: detect a sick GPU node, decide device or node, quarantine it through its owner.

``catalog``, ``classify`` and ``node_check`` run on nodes too (the node layer installs
them beside the fact collector), so they use the standard library only and keep Python
3.8 syntax. The rest (``policy``, ``report``, the fleet-side commands) runs where
fleetspec is installed.
"""
