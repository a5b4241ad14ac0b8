"""What the controller and the code it ships must agree on: annotation and label keys that
apply writes and the remediator reads, and the output limit the renderer configures for
the node check. One copy, here, at the lowest layer: the controller imports it, and it
ships with the node-side programs that read it.
"""

# The Node annotation that says why fleetspec cordoned a node: apply's drain writes it, and
# health's remediation (fleetspec.health.remediate, and the in-cluster k8s_remediator) reads
# it to tell its own cordons from anyone else's.
DRAIN_REASON = "fleetspec.io/drain-reason"

# The Node label that names a node's fleetspec partition (render's node labels write it; the
# remediator selects and limits by it).
PARTITION_LABEL = "fleetspec.io/partition"

# NPD cuts the plugin's stdout at the custom plugin config's ``max_output_length`` and makes
# it the condition's message (kubernetes/node-problem-detector docs/custom_plugin_monitor.md);
# the renderer sets that limit to this, and the node check keeps its message within it.
NPD_MAX_OUTPUT = 512

# Health actions that name one GPU: the node check lists their faults in NPD's message
# (``[devices: ...]``) and both Kubernetes remediators taint that GPU on a DRA pool.
# ``reset-when-idle`` (a pending row remap) is handled there as ``quarantine-device`` is.
DEVICE_ACTIONS = ("reset-when-idle", "quarantine-device")
