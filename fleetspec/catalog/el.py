"""The EL (RHEL, Rocky, AlmaLinux 9/10) package literals: ``data/el_packages.yaml``, typed.

Why a file of its own, read only when a fleet runs EL: the literals are evidence (each row
names its artefact), not a scheme; fleetspec never derives an EL version string from the
apt one or from the OS name. Kept out of the catalog snapshot so ``validate`` of an apt
fleet starts as fast as before.
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from typing import NamedTuple

import yaml

# name-[epoch:]version-release: RPM versions and releases hold no '-' (rpm(8), "NEVRA"); every
# vendor version here starts with a digit, which keeps a bare name (nvidia-driver-cuda) from
# parsing as name-version-release.
_NEVRA = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9_.+-]*)-(?:(?P<epoch>[0-9]+):)?(?P<version>[0-9][^-:]*)"
                    r"-(?P<release>[^-:]+)$")


class Nevra(NamedTuple):
    """One package at its exact EVR, with the node property it needs (``nvswitch``, ``imex``) or None."""

    name: str
    epoch: int
    version: str
    release: str
    condition: str | None = None

    @property
    def evr(self) -> str:
        """``3:580.82.07-1.el9``; no ``0:`` (dnf reads a missing epoch as 0)."""
        return f"{self.epoch}:{self.version}-{self.release}" if self.epoch else f"{self.version}-{self.release}"


class ElRelease(NamedTuple):
    el: int
    component: str
    release: str
    cuda: str | None
    packages: tuple[Nevra, ...]
    repo: str
    source: str
    seen: str
    unconfirmed: str


class ElRepo(NamedTuple):
    """A vendor's EL repository (``amd``: every repo.radeon.com tree, whose baseurls are the
    release rows' own) and the URL of the key that signs its packages, as its own ``.repo``
    names it: dnf with ``gpgcheck=1`` and no ``gpgkey`` refuses every package of it."""

    el: int
    vendor: str
    id: str
    baseurl: str
    gpgkey: str
    source: str


def _signing_key(row: dict) -> str:
    """A repository row's key URL; a row without one is refused (never ``gpgcheck=0``, never
    a URL made from a pattern: the key is the one the vendor's ``.repo`` names)."""
    key = row.get("gpgkey")
    if not isinstance(key, str) or not key.startswith("https://"):
        raise ValueError(f"el_packages.yaml: repository {row.get('id')!r} (EL{row.get('el')}) names no https:// "
                         "gpgkey: add the key URL the vendor's own .repo file names, with its source")
    return key


class ElSiteBuilt(NamedTuple):
    """Packages a site builds into its own repository (Slurm, Enroot, Pyxis): names per host
    group (``common``, ``slurm_controller``, ``slurm_node``, ``slurmdbd``), the release the
    project's spec gives them; the version is the spec's."""

    el: int
    component: str
    names: dict[str, tuple[str, ...]]
    release: str
    source: str
    seen: str
    unconfirmed: str


def parse_nevra(text: str, condition: str | None = None) -> Nevra:
    """``kmod-nvidia-open-dkms-3:580.82.07-1.el9`` -> its parts; ValueError for anything else."""
    m = _NEVRA.match(text)
    if m is None:
        raise ValueError(f"not a name-[epoch:]version-release: {text!r}")
    return Nevra(m["name"], int(m["epoch"] or 0), m["version"], m["release"], condition)


@functools.cache
def _raw() -> dict:
    return yaml.safe_load(resources.files("fleetspec.catalog").joinpath("data/el_packages.yaml").read_text())


@functools.cache
def el_site_built() -> tuple[ElSiteBuilt, ...]:
    return tuple(ElSiteBuilt(int(r["el"]), r["component"], {k: tuple(v) for k, v in r["names"].items()},
                             str(r["release"]), r["source"], str(r["seen"]), r.get("unconfirmed") or "")
                 for r in _raw()["site_built"])


def el_site_package(el: int, component: str) -> ElSiteBuilt | None:
    return next((r for r in el_site_built() if r.el == el and r.component == component), None)


@functools.cache
def el_data() -> tuple[tuple[ElRelease, ...], tuple[ElRepo, ...]]:
    raw = _raw()
    releases = []
    for r in raw["releases"]:
        pkgs = tuple(parse_nevra(p) if isinstance(p, str) else parse_nevra(p["nevra"], p.get("condition"))
                     for p in r["packages"])
        releases.append(ElRelease(int(r["el"]), r["component"], str(r["release"]), r.get("cuda"), pkgs, r["repo"],
                                  r["source"], str(r["seen"]), r.get("unconfirmed") or ""))
    repos = tuple(ElRepo(int(r["el"]), r["vendor"], r["id"], r["baseurl"], _signing_key(r), r["source"])
                  for r in raw["repos"])
    return tuple(releases), repos


def el_release(el: int, component: str, release: str, cuda: str | None = None,
               repo: str | None = None) -> ElRelease | None:
    """The row for ``component`` at ``release`` on EL ``el`` (NCCL: for the CUDA major.minor
    ``cuda``; with ``repo``, only a row of that repository: RCCL from its ROCm release's tree)."""
    for r in el_data()[0]:
        if (r.el == el and r.component == component and r.release == release and (r.cuda is None or r.cuda == cuda)
                and (repo is None or r.repo == repo)):
            return r
    return None


def el_repo(el: int, vendor: str) -> ElRepo | None:
    return next((r for r in el_data()[1] if r.el == el and r.vendor == vendor), None)
