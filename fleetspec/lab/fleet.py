"""The lab for a fleet spec: a few of its nodes as real lab hosts, a real Slurm cluster
for them on loopback, and an apt repository carrying exactly the versions the spec pins.

Why a scaled-down copy and not a simulation: plan/apply/verify are rehearsed through the
same playbooks, the same `scontrol`/`sinfo` calls and the same apt pins they use on a
datacenter, so a drain that would not happen, a version the repository lacks or a host
Ansible cannot reach fails here first.

Layout of a lab directory (default `.fleetspec/lab/` beside the spec):
  lab.json                 what `lab up` made: spec, hosts, mode, paths, pids
  inventory-overlay.yml    Ansible host vars: connection through the lab, packages from its repo
  env                      `export SLURM_CONF=...` for a shell
  repo/                    the flat apt repository (bind-mounted read-only into every host);
                           on an EL fleet repo/el/<host>/<path>: the stand-in RPM repositories
  hosts/                   the hosts' work dir (fleetspec.lab.hosts.Lab: ssh key, node layers)
  slurm/                   the cluster's config, state, logs and fake GPU devices
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from fleetspec.catalog.el import parse_nevra
from fleetspec.compile.ir import Fleet, PackageSource
from fleetspec.findings import Finding, Severity, locate
from fleetspec.lab import DEFAULT_PER_PARTITION, STATE_FILE
from fleetspec.lab.base import REPO_MOUNT, LabUnavailable, ensure_base, ensure_host_packages
from fleetspec.lab.el import EL_TREES, SITE_TREE, distro_tree, ensure_el_base
from fleetspec.lab.hosts import CGROUP_GONE, Lab, validate_name
from fleetspec.lab.repo import StandInPackage, build_repo, evidence_standins, pin_standins, stack_standins
from fleetspec.lab.rpmrepo import ElTree, StandInRpm, build_el_repos, el_trees, missing_tools, standin, tree_path
from fleetspec.lab.slurm import Cluster, ensure_slurm, restrict_slurm_files
from fleetspec.packages import EL_OS, PackagePin, container_packages, packages_for, rdma_packages, slurm_packages
from fleetspec.pipeline import compile_file
from fleetspec.render.ansible import mirror_var, render_ansible
from fleetspec.render.slurm import render_slurm

OVERLAY_FILE = "inventory-overlay.yml"
ENV_FILE = "env"
# Everything `lab up` creates inside the lab directory; `lab down` removes exactly these.
_OWNED = ("state",  # apply --lab keeps the rehearsal's state here; it dies with the hosts
           STATE_FILE, OVERLAY_FILE, ENV_FILE, "repo", "hosts", "slurm")
# The lab repository as the playbooks see it on every host (a file: source, no signature).
LAB_MIRROR = PackageSource(f"file:{REPO_MOUNT}", trusted=True)
SLURM_ROLES = ("slurm_controller", "slurm_node", "slurmdbd")
# The distribution's RDMA user space on EL (rdma-core, libibverbs: EL names, no
# ibverbs-providers; issue #42) at a modelled build: none is pinned, the roles install them by
# name from BaseOS (tests/ansible/test_pins_dnf.py's BASEOS models the same).
EL_DISTRO_BUILD = {"rdma-core": "48.0-1.el9", "libibverbs": "48.0-1.el9"}
EL_DISTRO_REQUIRES = {"libibverbs": ("rdma-core",)}


class LabSetupError(RuntimeError):
    """The lab cannot be made for this spec (invalid spec, bad host names, already up)."""


def default_lab_dir(spec: Path) -> Path:
    """`.fleetspec/lab/` beside the spec, next to the state store."""
    return Path(spec).resolve().parent / ".fleetspec" / "lab"


def default_mode() -> str:
    """`$FLEETSPEC_LAB_MODE` (nspawn | unshare), nspawn unless set."""
    return os.environ.get("FLEETSPEC_LAB_MODE", "nspawn")


# ---------------------------------------------------------------- pure: what the lab holds


@dataclass(frozen=True)
class Selection:
    """The hosts a lab runs: per partition its first nodes, plus the Slurm controller."""

    nodes: tuple[str, ...]  # fleet nodes, sorted
    controller: str | None
    slurm_nodes: tuple[str, ...]  # the nodes that run a slurmd (native Slurm only)

    @property
    def hosts(self) -> tuple[str, ...]:
        return self.nodes + ((self.controller,) if self.controller and self.controller not in self.nodes else ())


def select_hosts(fleet: Fleet, per_partition: int = DEFAULT_PER_PARTITION) -> Selection:
    """Per partition the first `per_partition` nodes by hostname, and the first controller.

    Why per partition: each partition is a scheduling and rollout unit (waves, drains), so
    each must be present in the lab. Host names must be valid lab names (they become
    hostnames and namespace names).
    """
    if per_partition < 1:
        raise LabSetupError(f"--nodes must be at least 1, not {per_partition}")
    chosen = sorted({h for p in fleet.partitions for h in sorted(p.nodes)[:per_partition]})
    native = fleet.slurm is not None and fleet.slurm.mode == "native"
    controller = fleet.slurm.controllers[0] if native and fleet.slurm and fleet.slurm.controllers else None
    slurm_nodes = tuple(h for h in chosen if native and (n := fleet.node(h)) is not None and n.scheduler == "slurm")
    selection = Selection(tuple(chosen), controller, slurm_nodes)
    for host in selection.hosts:
        try:
            validate_name(host)
        except ValueError as exc:
            raise LabSetupError(f"host {host!r} cannot be a lab host: {exc}") from None
    return selection


def fleet_pins(fleet: Fleet) -> list[tuple[str, str]]:
    """Every (package, exact version) the playbooks install for this fleet, sorted.

    The same calls the Ansible renderer makes: per stack `packages_for` with the GPUs of
    that stack's nodes, and SchedMD's Slurm packages for each Slurm role.
    """
    pins: set[tuple[str, str]] = set()
    for stack in fleet.stacks:
        gpus = {(n.gpu.model, n.gpu.count): n.gpu for n in fleet.nodes if n.stack == stack.name}
        pins.update((p.name, p.version) for p in packages_for(stack, fleet.os, [gpus[k] for k in sorted(gpus)]))
    pins.update((p.name, p.version) for p in site_pins(fleet))
    return sorted(pins)


def site_pins(fleet: Fleet) -> list[PackagePin]:
    """What a site builds into a repository of its own (SchedMD's Slurm packages for each
    Slurm role, Enroot/Pyxis), named for the fleet's OS (on EL: the catalog's site_built rows)."""
    if fleet.slurm is None or fleet.slurm.mode != "native":
        return []
    pins = slurm_packages(fleet.slurm.version, SLURM_ROLES, fleet.os)
    if fleet.slurm.enroot_version and fleet.slurm.pyxis_version:
        pins += container_packages(fleet.slurm.enroot_version, fleet.slurm.pyxis_version, fleet.os)
    return pins


def repo_packages(fleet: Fleet, evidence: bool = True) -> list[StandInPackage]:
    """What the lab's repository publishes for ``fleet``: each stack's whole package
    families at the pinned builds and at a newer build (``stack_standins``: the vendors'
    dependency graph, as their repositories carry every build), a stand-in for every
    other pin (Slurm, Enroot/Pyxis), and, on Ubuntu 24.04, the packages of the evidence
    repositories (``evidence_standins``) that these do not already name (``evidence``: a
    caller that joins several fleets' packages adds them once, after every fleet's own, so
    a bare evidence package never replaces a stand-in with files)."""
    found: dict[tuple[str, str], StandInPackage] = {}
    for stack in fleet.stacks:
        gpus = {(n.gpu.model, n.gpu.count): n.gpu for n in fleet.nodes if n.stack == stack.name}
        if gpus:
            for p in stack_standins(stack, fleet.os, [gpus[k] for k in sorted(gpus)]):
                found[(p.name, p.version)] = p
    for p in pin_standins([pin for pin in fleet_pins(fleet) if pin not in found]):
        found[(p.name, p.version)] = p
    if evidence and fleet.os == "ubuntu-24.04":
        # What the vendors publish beside the pins (fleetspec/lab/vendor_packages.yaml, not
        # made from the pins): Canonical's -580 builds, 580's unsuffixed tools, builds newer
        # than the pins, cuDNN's meta chain, the graphics repository's packages.
        for url, packages in evidence_standins().items():
            for p in packages if url != "installed" else ():
                found.setdefault((p.name, p.version), p)
    return [found[k] for k in sorted(found)]


def lab_slurm_files(fleet: Fleet, nodes: tuple[str, ...]) -> dict[PurePosixPath, str]:
    """The fleet's rendered Slurm files, every node/partition/switch line limited to `nodes`."""
    return restrict_slurm_files(render_slurm(fleet), nodes)


def overlay_inventory(host_vars: Mapping[str, Mapping[str, Any]], mirror: PackageSource = LAB_MIRROR,
                      dnf_options: list[str] | None = None) -> dict:
    """The Ansible inventory overlay: each lab host's connection vars plus the lab mirror.

    The mirror goes into host vars, not `all.vars`: an inventory file's group vars lose to
    the rendered `group_vars/all.yml` (which sets `fleetspec_package_mirror: null`), while
    inventory host vars win over every group var. With the mirror set, the playbooks
    configure only the lab repository and drop the vendors' sources.

    On an EL fleet (``dnf_options``, from ``el_repo_options``) the mirror is apt-shaped and
    means nothing to dnf: the hosts instead get ``fleetspec_dnf_options``, which point each
    vendor repository of the rendered ``.repo`` files at the lab's copy (the files themselves
    stay as rendered, as on a datacenter node), the same host-var route.
    """
    if dnf_options is not None:
        hosts = {name: {**dict(v), "fleetspec_dnf_options": list(dnf_options)} for name, v in sorted(host_vars.items())}
    else:
        hosts = {name: {**dict(v), "fleetspec_package_mirror": mirror_var(mirror)}
                 for name, v in sorted(host_vars.items())}
    return {"all": {"hosts": hosts}}


def rendered_repos(fleet: Fleet) -> dict[str, str]:
    """{repository id: baseurl} of every ``ansible/pins/<stack>.repo`` the fleet renders (EL)."""
    repos: dict[str, str] = {}
    for path, text in render_ansible(fleet).items():
        if path.suffix == ".repo":
            parser = configparser.ConfigParser(interpolation=None)
            parser.read_string(text)
            repos.update({rid: parser[rid]["baseurl"] for rid in parser.sections()})
    return dict(sorted(repos.items()))


def el_repo_options(fleet: Fleet) -> list[str]:
    """dnf ``--setopt`` arguments that point each rendered vendor repository at the lab's copy
    (``file:`` under the lab repository's mount, laid out as the vendor's URL) with no
    signature check: the lab's stand-ins are unsigned, as the apt mirror is ``trusted``."""
    options = []
    for rid, url in rendered_repos(fleet).items():
        options += [f"--setopt={rid}.baseurl=file://{REPO_MOUNT}/{EL_TREES}/{tree_path(url)}",
                    f"--setopt={rid}.gpgcheck=0"]
    return options


def el_repo_trees(fleet: Fleet) -> tuple[list[ElTree], dict[str, list[StandInRpm]]]:
    """What the lab serves to an EL fleet's hosts: the catalog's stand-in tree of every vendor
    repository the fleet's .repo files name (every catalog build and a newer one, the driver
    streams: fleetspec.lab.rpmrepo), the distribution's trees (BaseOS: the RDMA user space of
    an InfiniBand/RoCE fleet; AppStream and CRB empty, present as on a Rocky node) and the
    site's own (``site_pins``: Slurm, Enroot/Pyxis)."""
    wanted = {url.rstrip("/") for url in rendered_repos(fleet).values()}
    trees = [t for t in el_trees(EL_OS[fleet.os]) if t.baseurl in wanted]
    have = {r.nevra for t in trees for r in t.rpms}
    for stack in fleet.stacks:
        gpus = {(n.gpu.model, n.gpu.count): n.gpu for n in fleet.nodes if n.stack == stack.name}
        for pin in packages_for(stack, fleet.os, [gpus[k] for k in sorted(gpus)]) if gpus else ():
            if parse_nevra(f"{pin.name}-{pin.version}") not in have:
                raise LabSetupError(f"stack {stack.name}: {pin.name}-{pin.version} is in none of the catalog's EL "
                                    "repositories the lab serves (fleetspec/catalog/data/el_packages.yaml)")
    rdma = rdma_packages(fleet.fabric.type if fleet.fabric else None, fleet.os)
    baseos = [standin(parse_nevra(f"{name}-{EL_DISTRO_BUILD[name]}"))._replace(requires=EL_DISTRO_REQUIRES.get(name, ()))
              for name in rdma]
    major = EL_OS[fleet.os]
    distro = {distro_tree(r, major): list(baseos if r == "baseos" else [])
              for r in ("baseos", "appstream", "crb")}
    # The site's own repository (SITE_TREE, in the EL hosts' fleetspec-lab-site.repo): SchedMD's
    # slurm.spec makes each daemon package require slurm at its own version-release.
    site = [standin(n)._replace(requires=(f"slurm = {n.version}-{n.release}",) if n.name.startswith("slurm-") else ())
            for n in (parse_nevra(f"{p.name}-{p.version}") for p in site_pins(fleet))]
    distro[SITE_TREE] = site
    return trees, distro


def env_snippet(slurm_conf: Path | None) -> str:
    """Shell lines pointing Slurm's clients at the lab's controller."""
    if slurm_conf is None:
        return "# this lab runs no Slurm\n"
    return f"export SLURM_CONF={json.dumps(str(slurm_conf))}\n"


# ---------------------------------------------------------------- the running lab


@dataclass
class LabHandle:
    """A lab that `lab up` made, as recorded in `dir/lab.json`; what apply and verify use."""

    dir: Path
    spec: Path
    hosts: tuple[str, ...]
    slurm_nodes: tuple[str, ...]
    mode: str
    base: Path
    per_partition: int
    pids: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def load(cls, dir: Path) -> LabHandle:
        path = Path(dir) / STATE_FILE
        if not path.exists():
            raise LabSetupError(f"no lab at {dir} ({path} is missing): run `fleetspec lab up SPEC`")
        data = json.loads(path.read_text())
        return cls(Path(dir), Path(data["spec"]), tuple(data["hosts"]), tuple(data["slurm_nodes"]), data["mode"],
                   Path(data["base"]), data["per_partition"], data.get("pids", {}))  # fmt: skip

    def save(self) -> None:
        data = {
            "spec": str(self.spec),
            "hosts": list(self.hosts),
            "slurm_nodes": list(self.slurm_nodes),
            "mode": self.mode,
            "base": str(self.base),
            "per_partition": self.per_partition,
            "repo_dir": str(self.repo_dir),
            "inventory_overlay": str(self.inventory_overlay),
            "slurm_conf": str(self.slurm_conf) if self.slurm_conf else None,
            "pids": self.pids,
        }
        tmp = self.dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.rename(self.dir / STATE_FILE)

    @property
    def el(self) -> bool:
        """Whether the hosts are EL-shaped (fleetspec.lab.el): their base carries Rocky's release files."""
        return (self.base / "etc/redhat-release").exists()

    @property
    def repo_dir(self) -> Path:
        return self.dir / "repo"

    @property
    def inventory_overlay(self) -> Path:
        return self.dir / OVERLAY_FILE

    @property
    def env_file(self) -> Path:
        return self.dir / ENV_FILE

    @property
    def slurm_root(self) -> Path:
        return self.dir / "slurm"

    @property
    def slurm_conf(self) -> Path | None:
        return self.slurm_root / "etc" / "slurm.conf" if self.slurm_nodes else None

    @property
    def package_mirror(self) -> PackageSource:
        """The mirror to render the playbooks' vars with when targeting this lab."""
        return LAB_MIRROR

    def lab(self) -> Lab:
        """The hosts, as fleetspec.lab.hosts.Lab (reads its own state under `hosts/`)."""
        return Lab(self.dir / "hosts", self.base, repo_dir=self.repo_dir, mode=self.mode)

    def cluster(self) -> Cluster | None:
        return Cluster(self.slurm_root) if self.slurm_conf is not None and self.slurm_conf.exists() else None

    def ssh_argv(self, host: str, *command: str) -> list[str]:
        """ssh argv running `command` on lab host `host`."""
        return self.lab().ssh.argv(host, *command)

    def scontrol(self, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """The host's real `scontrol` against the lab's controller (SLURM_CONF set)."""
        return self._slurm_client("scontrol", *args, timeout=timeout)

    def sinfo_states(self) -> dict[str, tuple[str, str]]:
        """{node: (state, reason)} from the real `sinfo` (reason "" when none)."""
        done = self._slurm_client("sinfo", "-h", "-N", "-o", "%N|%T|%E")
        if done.returncode != 0:
            raise LabSetupError(f"sinfo failed: {done.stderr.strip()}")
        states = {}
        for line in done.stdout.splitlines():
            node, state, reason = line.split("|", 2)
            states[node] = (state, "" if reason == "none" else reason)
        return states

    def _slurm_client(self, tool: str, *args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        if self.slurm_conf is None:
            raise LabSetupError(f"the lab at {self.dir} runs no Slurm")
        env = {**os.environ, "SLURM_CONF": str(self.slurm_conf)}
        return subprocess.run([tool, *args], env=env, capture_output=True, text=True, timeout=timeout)

    def refresh_repo(self, fleet: Fleet) -> int:
        """Rebuild the repository in place for `fleet`'s pins; returns the package count.

        In place because every host bind-mounts the directory read-only: new contents are
        visible to them at once (after `apt-get update`, which the playbooks run). An EL
        fleet's RPM trees are built beside the live ones and swapped in by rename, so a host
        never reads a half-indexed tree (dnf reads repodata afresh: metadata_expire=0 in the
        lab's rocky.repo; the vendor repositories' caches expire as the .repo files say).
        """
        if fleet.os not in EL_OS:
            build_repo(repo_packages(fleet), self.repo_dir)
            return self.package_count()
        if missing := missing_tools():
            raise LabUnavailable(f"the lab's EL repositories need {', '.join(missing)} (Debian packages)")
        trees, distro = el_repo_trees(fleet)
        live, new, old = (self.repo_dir / name for name in (EL_TREES, f".{EL_TREES}-new", f".{EL_TREES}-old"))
        for stale in (new, old):
            shutil.rmtree(stale, ignore_errors=True)
        build_el_repos(trees, new, distro)
        if live.exists():
            live.rename(old)
        new.rename(live)
        shutil.rmtree(old, ignore_errors=True)
        return self.package_count()

    def write_overlay(self, fleet: Fleet) -> None:
        """The inventory overlay for the running hosts (``overlay_inventory``)."""
        options = el_repo_options(fleet) if fleet.os in EL_OS else None
        overlay = overlay_inventory(self.lab().ansible_vars(), dnf_options=options)
        self.inventory_overlay.write_text(yaml.safe_dump(overlay, sort_keys=False))

    def package_count(self) -> int:
        return len(list(self.repo_dir.glob("*.deb"))) + len(list((self.repo_dir / EL_TREES).rglob("*.rpm")))


@dataclass(frozen=True)
class LabStatus:
    hosts: dict[str, str]  # host -> running | stopped
    slurm: dict[str, tuple[str, str]]  # node -> (state, reason); empty without Slurm
    controller_running: bool
    packages: int


def _compile(spec: Path) -> Fleet:
    compiled = compile_file(spec)
    if compiled.fleet is None or not compiled.valid:
        errors = "\n".join(f"  {f.file}:{f.line}:{f.column}: {f.severity} [{f.rule}] {f.message}"
                           for f in compiled.located() if f.severity >= Severity.ERROR)
        raise LabSetupError(f"{spec} has errors: fix them, then run lab up again\n{errors}")
    if EL_OS.get(compiled.fleet.os, 9) != 9:
        at = locate(Finding("lab", Severity.ERROR, "", ("spec", "os")), compiled.source)
        raise LabSetupError(f"{at.file}:{at.line}:{at.column}: spec.os is {compiled.fleet.os}: the lab's EL hosts are "
                            "shaped as Rocky Linux 9 (dnf 4.14 with modularity, EL9's own dnf line); EL10's dnf has "
                            "no module streams and its lab host is not built. Rehearse on a rocky-9 copy of the spec")
    return compiled.fleet


def lab_up(spec: Path, per_partition: int = DEFAULT_PER_PARTITION, lab_dir: Path | None = None,
           mode: str | None = None, progress: Callable[[str], None] | None = None) -> tuple[LabHandle, bool]:  # fmt: skip
    """Bring the lab for `spec` up; returns (handle, started).

    When the lab is already up with the same hosts, only the repository is rebuilt for
    the spec as it is now (started = False): the way to publish a changed tuple to the lab.
    ``progress`` is told each step as it starts (and the base image build's steps).
    """
    say = progress or (lambda _line: None)
    spec = Path(spec).resolve()
    fleet = _compile(spec)
    selection = select_hosts(fleet, per_partition)
    lab_dir = Path(lab_dir).resolve() if lab_dir is not None else default_lab_dir(spec)
    if (lab_dir / STATE_FILE).exists():
        handle = LabHandle.load(lab_dir)
        if handle.hosts != selection.hosts:
            raise LabSetupError(f"the lab at {lab_dir} is up with hosts {', '.join(handle.hosts)}, not "
                                f"{', '.join(selection.hosts)}: run `fleetspec lab down` first")  # fmt: skip
        if handle.el != (fleet.os in EL_OS):
            raise LabSetupError(f"the lab at {lab_dir} runs {'EL' if handle.el else 'Debian'}-shaped hosts and "
                                f"{spec} has spec.os {fleet.os}: run `fleetspec lab down` first")
        handle.spec = spec
        say("rebuilding the lab's package repository for the spec")
        handle.refresh_repo(fleet)
        handle.write_overlay(fleet)  # an EL fleet's repository ids follow its tuples (rocm-<release>)
        handle.save()
        return handle, False
    say("checking the host's packages (mmdebstrap, systemd-nspawn, ...)")
    ensure_host_packages()
    el = fleet.os in EL_OS
    base = ensure_el_base(progress=say) if el else ensure_base(progress=say)
    if selection.slurm_nodes:
        ensure_slurm()
    handle = LabHandle(lab_dir, spec, selection.hosts, selection.slurm_nodes, mode or default_mode(), base,
                       per_partition)  # fmt: skip
    try:
        handle.lab()
    except ValueError as exc:  # a path the hosts' mounts cannot take
        raise LabSetupError(f"lab directory {lab_dir}: {exc}") from None
    lab_dir.mkdir(parents=True, exist_ok=True)
    handle.save()  # first, so that `lab down` finds a lab that failed half-way up
    try:
        say("building the lab's package repository (stand-ins of the spec's packages)")
        handle.refresh_repo(fleet)
        lab = handle.lab()
        say(f"starting {len(selection.hosts)} host(s): {', '.join(selection.hosts)}")
        nodes = lab.up(list(selection.hosts))
        handle.pids["hosts"] = {n.name: n.pid for n in nodes}
        handle.write_overlay(fleet)
        if selection.slurm_nodes:
            say(f"starting slurmctld and {len(selection.slurm_nodes)} slurmd")
            cluster = Cluster(handle.slurm_root, lab_slurm_files(fleet, selection.slurm_nodes))
            cluster.start()
            handle.pids["slurm"] = {d.name: d.pid for d in cluster.daemons}
        handle.env_file.write_text(env_snippet(handle.slurm_conf))
        handle.save()
    except BaseException:
        lab_down(lab_dir)
        raise
    return handle, True


def lab_status(lab_dir: Path) -> LabStatus:
    handle = LabHandle.load(lab_dir)
    cluster = handle.cluster()
    running = cluster is not None and cluster.running
    return LabStatus(
        hosts=handle.lab().status(),
        slurm=handle.sinfo_states() if running else {},
        controller_running=running,
        packages=handle.package_count(),
    )


def lab_down(lab_dir: Path) -> None:
    """Stop the Slurm daemons and the hosts by their recorded pids, remove namespaces,
    cgroups and every file the lab made. Works on a lab that failed half-way up."""
    lab_dir = Path(lab_dir).resolve()
    handle = LabHandle.load(lab_dir)
    if (handle.slurm_root / "etc" / "slurm.conf").exists():
        Cluster(handle.slurm_root).stop()
    try:
        handle.lab().down()
    except OSError as exc:
        # Lab.down walks a container's cgroup tree while systemd removes it (ENOENT, or
        # ENODEV for a dead cgroup's directory); the lab's own state survives that, so a
        # second pass finishes the job.
        if exc.errno not in CGROUP_GONE:
            raise
        handle.lab().down()
    for name in _OWNED:
        path = lab_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    try:
        lab_dir.rmdir()
    except OSError:
        pass  # the user's own files are there too (--dir elsewhere): leave them
