"""The blast-radius limit of Kubernetes remediation (``spec.health.min_healthy``), one
decision for both remediators (the in-cluster ``k8s_remediator`` and ``fleetspec health
--remediate``). Stdlib only (Python 3.8 syntax): the remediator's CronJob ships it.

A fault that hits every node at once (a policy push with a wrong GPU count: ``gpu-lost``
everywhere; a driver update that breaks nvidia-smi: ``probe-failed`` everywhere) is far more
likely a false positive than a fleet of broken GPUs, and draining on it empties the GPU pool
within one run. So, as medik8s Node Healthcheck does with ``minHealthy``, new remediation
happens only while at least ``min_healthy`` of the selected nodes are healthy: a count
(``3``) or a percentage of the selected nodes, rounded up (``51%``, NHC's long-standing
default). Below it nothing new is cordoned, drained or tainted, what is already in place
stays, a recovered node is still released, and the run fails so a human looks.

Sources: medik8s NHC ``spec.minHealthy`` ("Remediation is allowed if at least MinHealthy nodes
selected by selector are healthy", default 51%,
https://github.com/medik8s/node-healthcheck-operator/blob/main/docs/configuration.md;
api/v1alpha1/nodehealthcheck_types.go; the controller compares the healthy count with
``intstr.GetScaledValueFromIntOrPercent(minHealthy, selected, roundUp=true)``); newer NHC
releases also take ``maxUnhealthy``, the same limit counted the other way, and require one of
the two. Cluster API MachineHealthCheck ``maxUnhealthy`` short-circuits remediation the same way
(https://cluster-api.sigs.k8s.io/tasks/automated-machine-management/healthchecking).
"""

import re
from typing import Optional

DEFAULT = "51%"
HELD = "remediation held back: "
PATTERN = r"^(100|[1-9]?[0-9])%$|^[0-9]+$"  # NHC's pattern, without leading zeros in a percentage


def needed(min_healthy: str, selected: int) -> int:
    """How many of ``selected`` nodes must be healthy (a percentage is rounded up, as NHC does)."""
    if not re.match(PATTERN, min_healthy):
        raise ValueError("min_healthy %r: give a count of nodes (3) or a percentage (51%%)" % min_healthy)
    if min_healthy.endswith("%"):
        return -(-int(min_healthy[:-1]) * selected // 100)
    return int(min_healthy)


def hold(min_healthy: str, selected: int, healthy: int, sick: int) -> Optional[str]:
    """None when remediation may go on; else the one line that says why it is held back.
    ``healthy``: nodes known to need no action; ``sick``: nodes that call for one; the rest
    of ``selected`` gave no verdict (counted as not healthy, never as healthy)."""
    need = needed(min_healthy, selected)
    if sick == 0 or healthy >= need:
        return None
    unknown = selected - healthy - sick
    return (HELD + "%d of %d GPU nodes look sick%s, %d healthy, below min_healthy %s (%d healthy "
            "needed): nothing new is cordoned, drained or tainted. So many at once is more likely a systematic "
            "false positive (a policy change, a driver update) than failed GPUs: a human must look "
            "(spec.health.min_healthy, docs/health.md)"
            % (sick, selected, " (%d more gave no verdict)" % unknown if unknown else "", healthy, min_healthy, need))
