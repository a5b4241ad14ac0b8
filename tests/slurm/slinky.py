"""What the Slinky slurm-operator makes of fleetspec's ``slinky-values.yaml``: the slurm.conf
its Controller writes and the ``slurmd --conf`` each NodeSet pod runs, so that a real
slurmctld and real dynamic slurmds can run them (tests/slurm/test_releases_real.py).

A stand-in for Helm and the operator, modelled line by line on SlinkyProject/slurm-operator
(read at its main branch, v1beta1 API, chart v1.x):
- helm/slurm/templates/_helpers.tpl ``_toList``: a map becomes ``Key=v1,v2`` items, keys in
  sorted order (Go templates range over maps sorted), empty values left out;
- helm/slurm/templates/controller/_helpers.tpl ``slurm.controller.extraConf``: the controller's
  ``extraConfMap`` items, then per enabled partition ``PartitionName=<p> Nodes=<nodesets,
  sorted, unique> <configMap items joined by spaces>``;
- helm/slurm/templates/nodeset/_helpers.tpl ``slurm.worker.extraConf``: a NodeSet's
  ``extraConfMap`` items joined by spaces;
- internal/builder/controllerbuilder/controller_config.go ``buildSlurmConf``: ClusterName,
  ``MaxNodeCount=1024``, ``SlurmctldParameters=enable_configless,reconfig_on_restart``, one
  ``NodeSet=<name> Feature=<name>`` line per NodeSet, then the extraConf (the operator's
  hosts, ports, users, auth and log paths are replaced by the harness's localization anyway);
- internal/builder/workerbuilder/worker_app.go ``slurmdConfArgs``: ``slurmd -Z --conf`` with
  ``Features=<nodeset>`` merged with the NodeSet's own Features, items sorted (its
  ``Topology=$SLINKY_TOPOLOGY`` from a pod annotation is left out: no such annotation here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def to_list(config: Mapping[str, Any]) -> list[str]:
    """Helm ``_toList``: ``Key=value`` (a list comma-joined) per non-empty value, keys sorted."""
    return [f"{key}={','.join(map(_text, value)) if isinstance(value, list) else _text(value)}"
            for key, value in sorted(config.items()) if value]


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def nodesets(values: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {name: n for name, n in values.get("nodesets", {}).items() if name != "_defaults" and n.get("enabled")}


def controller_extra_conf(values: Mapping[str, Any]) -> list[str]:
    lines = to_list(values.get("controller", {}).get("extraConfMap") or {})
    for name, part in sorted(values.get("partitions", {}).items()):
        if not part.get("enabled"):
            continue
        members = sorted(set(part["nodesets"]))
        lines.append(" ".join([f"PartitionName={name}", f"Nodes={','.join(members)}",
                               " ".join(to_list(part.get("configMap") or {}))]))
    return lines


def slurm_conf(values: Mapping[str, Any]) -> str:
    """The Controller's slurm.conf (the lines fleetspec's values decide, and the operator's own)."""
    lines = [f"ClusterName={values['clusterName']}", "MaxNodeCount=1024",
             "SlurmctldParameters=enable_configless,reconfig_on_restart"]
    lines += [f"NodeSet={name} Feature={name}" for name in sorted(nodesets(values))]
    return "\n".join([*lines, *controller_extra_conf(values)]) + "\n"


def slurmd_conf(name: str, nodeset: Mapping[str, Any]) -> str:
    """A NodeSet pod's ``slurmd -Z --conf`` value."""
    conf: dict[str, str] = {"Features": name}
    for item in to_list(nodeset.get("extraConfMap") or {}):
        key, value = item.split("=", 1)
        key = "Features" if key.title() in ("Feature", "Features") else key.title()
        conf[key] = f"{conf[key]},{value}" if key in conf else value
    return " ".join(sorted(f"{k}={v}" for k, v in conf.items()))
