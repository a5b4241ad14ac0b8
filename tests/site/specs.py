"""Specs with site settings, written the way a site would (YAML text, so errors have lines)."""

from __future__ import annotations

BASE = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: site}}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}}
  racks:
    - name: r01
      nodes:
        - hosts: h100-[01-02]
          gpu: {{model: h100-sxm, count: 8}}
          stack: hopper
          scheduler: slurm
          cpus: 16
          memory_gb: 64
{node_settings}
  slurm:
    version: "{version}"
    controllers: ctl-01
{slurm_extra}
"""


def spec(slurm_extra: str = "", node_settings: str = "", version: str = "25.11.8") -> str:
    return BASE.format(slurm_extra=slurm_extra, node_settings=node_settings, version=version)
