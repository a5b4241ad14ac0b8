"""Real apt, resolving against a real flat repository, in a private directory tree.

Why not a lab host: whether a set of pins resolves is apt's decision alone. apt-get takes
``-o Dir=...`` for a whole root of its own (sources, preferences, lists, dpkg status), so
the same apt 2.x that runs on the nodes answers ``apt-get -s install $(cat S.list)``
without root, namespaces or a running system; ``installed`` writes a dpkg status file so
an upgrade or a downgrade starts from a real installed set.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from pathlib import Path

from fleetspec.lab.repo import StandInPackage, _control

_INST = re.compile(r"^Inst (\S+) (?:\[(\S+)\] )?\((\S+) ")


class AptRoot:
    def __init__(self, root: Path, repo: Path | list[Path]) -> None:
        """``repo``: one flat repository, or several (a node's sources: the vendors' and the distribution's)."""
        self.root = root
        for d in ("etc/apt/preferences.d", "etc/apt/sources.list.d", "etc/apt/apt.conf.d", "var/lib/apt/lists/partial",
                  "var/cache/apt/archives/partial", "var/lib/dpkg"):  # fmt: skip
            (root / d).mkdir(parents=True, exist_ok=True)
        repos = repo if isinstance(repo, list) else [repo]
        (root / "etc/apt/sources.list").write_text("".join(f"deb [trusted=yes] file:{r} ./\n" for r in repos))
        self.installed([])
        self.apt("update")

    def options(self) -> list[str]:
        return ["-o", f"Dir={self.root}", "-o", f"Dir::State::status={self.root}/var/lib/dpkg/status",
                "-o", "Debug::NoLocking=1", "-o", "APT::Architecture=amd64", "-o", "APT::Get::Show-Versions=1"]

    def apt(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["apt-get", *self.options(), *args], capture_output=True, text=True, timeout=120,
                              env={"LC_ALL": "C", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})

    def preferences(self, text: str) -> None:
        (self.root / "etc/apt/preferences.d/fleetspec-stack.pref").write_text(text)

    def installed(self, packages: Iterable[StandInPackage]) -> None:
        entries = []
        for p in packages:
            control = _control(p).replace(f"Package: {p.name}\n", f"Package: {p.name}\nStatus: install ok installed\n", 1)
            entries.append(control)
        (self.root / "var/lib/dpkg/status").write_text("\n".join(entries))

    def simulate(self, specs: Iterable[str]) -> tuple[subprocess.CompletedProcess[str], dict[str, tuple[str | None, str]]]:
        """``apt-get -s install SPECS``: the process and {package: (from version, to version)}."""
        done = self.apt("-s", "-q", "--allow-downgrades", "install", *specs)
        moves = {m[1]: (m[2], m[3]) for line in done.stdout.splitlines() if (m := _INST.match(line))}
        return done, moves
