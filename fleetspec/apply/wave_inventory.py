"""A wave's Ansible run sees only its hosts (issue #30 item 3).

The rendered inventory holds every host of the fleet (20,000 nodes: ~40 s of CPU and
~0.5 GB for ansible-playbook to load, at each run). A wave's run gets an inventory of
its own: the same groups, each group's hosts narrowed to the wave's nodes and the hosts
that are not fleet nodes (controllers, the accounting host: plays and templates may look
them up), the group variables unchanged. It is written beside the rendered
``inventory.yml``, because the roles find the rendered Slurm and health files from
``inventory_dir`` and Ansible reads ``group_vars/`` beside the inventory, and removed when
the run ends. The rendered inventory is read once per apply (libyaml), not once per wave.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml


class WaveInventories:
    def __init__(self, rendered: Path, fleet_nodes: Collection[str]) -> None:
        self.rendered = rendered
        self.fleet_nodes = frozenset(fleet_nodes)
        self._data: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._serial = 0

    def _loaded(self) -> dict[str, Any]:
        with self._lock:
            if self._data is None:
                loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
                with open(self.rendered, encoding="utf-8") as handle:
                    self._data = yaml.load(handle, Loader=loader) or {}
            return self._data

    def narrowed(self, hosts: Collection[str]) -> dict[str, Any]:
        """The rendered inventory with only ``hosts`` of the fleet's nodes."""
        keep = set(hosts)

        def group(g: Any) -> Any:
            if not isinstance(g, dict):
                return g
            out = {k: v for k, v in g.items() if k not in ("hosts", "children")}
            if isinstance(g.get("hosts"), dict):
                out["hosts"] = {h: v for h, v in g["hosts"].items() if h in keep or h not in self.fleet_nodes}
            if isinstance(g.get("children"), dict):
                out["children"] = {name: group(child) for name, child in g["children"].items()}
            return out

        return {name: group(g) for name, g in self._loaded().items()}

    @contextmanager
    def for_hosts(self, hosts: Collection[str]) -> Iterator[Path]:
        """The wave's inventory file, beside the rendered one, for the length of the run."""
        with self._lock:
            self._serial += 1
            serial = self._serial
        path = self.rendered.with_name(f"inventory.wave-{os.getpid()}-{serial}.yml")
        text = yaml.dump(self.narrowed(hosts), Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
                         default_flow_style=False, sort_keys=False)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(f"# A wave's share of {self.rendered.name} (fleetspec apply; removed after the run).\n")
                handle.write(text)
            yield path
        finally:
            path.unlink(missing_ok=True)


def narrowed_runner(run_playbook: Any, inventories: list[Path], fleet_nodes: Collection[str]) -> Any:
    """``run_playbook(inventories, limit=..., **kw)`` as apply's engine: a run limited to
    at most half of the fleet's nodes (a wave, a hook on it) gets the wave's inventory in
    place of the rendered one (the overlays stay); a larger run (the converge run over a
    new fleet) the whole one."""
    waves = WaveInventories(inventories[0], fleet_nodes)
    nodes = max(1, len(waves.fleet_nodes))

    def run(limit: Collection[str] | None = None, **kwargs: Any) -> Any:
        hosts = list(limit) if limit is not None else None
        if hosts and len(hosts) * 2 <= nodes:
            with waves.for_hosts(hosts) as inventory:
                return run_playbook([inventory, *inventories[1:]], limit=hosts, **kwargs)
        return run_playbook(inventories, limit=hosts, **kwargs)

    run.waves = waves  # type: ignore[attr-defined]
    return run
