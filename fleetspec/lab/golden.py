"""A rendered golden image recipe (``baremetal/golden/<stack>.sh``), run for the lab.

The recipe is run as rendered, from its own two files (``<stack>.sh`` and ``<stack>.pref``)
and an ``authorized_keys`` the lab makes: nothing else goes in. Its packages come from
Debian's mirror (the recipe names it) and from the lab's stand-in vendor repository, which
the lab's fleets name as their ``packages.mirror`` (``file:/srv/fleetspec-repo``, as the
nspawn hosts see it). On a build host that path is the site's mirror; here the recipe runs
in a private mount namespace where the lab's repository directory is bound at that path,
so this machine's /srv is never touched.

Cached like the VM image (vm.py): one build per recipe and preferences text, kept in the lab
cache with the SSH key that logs into the booted image.

A golden image's slurmd must be a real one, to register with the lab's slurmctld: the recipe
installs SchedMD's ``slurm-smd-slurmd`` (fleetspec.packages.slurm_packages), which the lab has
no build of, so `debian_slurm` makes the lab repository's ``slurm-smd*`` stand-ins depend on
Debian's build of the same Slurm release, the one this machine's slurmctld is
(``slurmd``/``slurm-client`` from bookworm's main, apt-cache policy: 22.05.8-4+deb12u3). The
image then holds Debian's slurmd binary under SchedMD's package names.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from fleetspec.lab.base import REPO_MOUNT, LabUnavailable, default_cache_dir
from fleetspec.lab.repo import StandInPackage

LAYOUT = "golden-layout-1"


def golden_key(recipe: str, preferences: str) -> str:
    """Cache key: the recipe and its apt preferences, as rendered (they name every input)."""
    text = "\n".join((recipe, preferences, LAYOUT))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class GoldenImage:
    """A built golden image: what the recipe packs, and the root key its authorized_keys holds."""

    root: Path

    @property
    def files(self) -> Path:
        """The directory served as ``<image_url>/<stack>/``."""
        return self.root / "image"

    @property
    def ssh_key(self) -> Path:
        return self.root / "id_ed25519"

    @property
    def build_log(self) -> Path:
        return self.root / "build.log"


def ensure_golden_image(files: dict[PurePosixPath, str], stack: str, repo_dir: Path,
                        cache_dir: Path | None = None) -> GoldenImage:
    """The image of ``stack`` from the rendered ``files`` (render_baremetal's), built once."""
    recipe = files[PurePosixPath("baremetal/golden") / f"{stack}.sh"]
    preferences = files[PurePosixPath("baremetal/golden") / f"{stack}.pref"]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = cache / f"golden-{stack}-{golden_key(recipe, preferences)}"
    if (final / "image" / "rootfs.squashfs").exists():
        return GoldenImage(final)
    if os.geteuid() != 0:
        raise LabUnavailable("building the golden image needs root (mmdebstrap --mode=root, mount)")
    missing = [t for t in ("mmdebstrap", "mksquashfs", "unshare", "ssh-keygen") if shutil.which(t) is None]
    if missing:
        raise LabUnavailable(f"the golden image needs {missing} (mmdebstrap, squashfs-tools, util-linux, "
                             "openssh-client)")
    if Path(REPO_MOUNT).parent in (cache, *cache.parents):
        raise LabUnavailable(f"the lab cache {cache} is under {Path(REPO_MOUNT).parent}, which the build hides")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-golden-", dir=cache))
    try:
        image = GoldenImage(tmp)
        recipe_dir = tmp / "recipe"
        recipe_dir.mkdir()
        (recipe_dir / f"{stack}.sh").write_text(recipe)
        (recipe_dir / f"{stack}.pref").write_text(preferences)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fleetspec-golden",
                        "-f", str(image.ssh_key)], check=True)
        shutil.copyfile(str(image.ssh_key) + ".pub", recipe_dir / "authorized_keys")
        # A tmpfs over /srv in this namespace only, the lab's repository bound read-only where
        # the fleet's file: mirror points.
        srv = shlex.quote(str(Path(REPO_MOUNT).parent))
        script = (f"mount -t tmpfs fleetspec-srv {srv} && mkdir -p {shlex.quote(REPO_MOUNT)} && "
                  f"mount --bind {shlex.quote(str(Path(repo_dir).resolve()))} {shlex.quote(REPO_MOUNT)} && "
                  f"mount -o remount,bind,ro {shlex.quote(REPO_MOUNT)} && "
                  f"exec sh {shlex.quote(str(recipe_dir / f'{stack}.sh'))} {shlex.quote(str(image.files))} "
                  f"{shlex.quote(str(recipe_dir / 'authorized_keys'))}")
        with open(image.build_log, "wb") as log:
            proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise RuntimeError(f"the golden image recipe failed ({proc.returncode}): "
                                 f"{image.build_log.read_text(errors='replace')[-3000:]}")
        try:
            tmp.rename(final)
        except OSError:
            if not (final / "image" / "rootfs.squashfs").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return GoldenImage(final)


# SchedMD's package -> Debian's package that carries the same programs (slurm-smd-slurmd:
# slurmd; slurm-smd-client: sinfo, scontrol, ...; slurm-smd: the plugins, slurm-wlm-basic-plugins).
DEBIAN_SLURM = {"slurm-smd": "slurm-wlm-basic-plugins", "slurm-smd-client": "slurm-client", "slurm-smd-slurmd": "slurmd"}


def debian_slurm(packages: list[StandInPackage], release: str) -> list[StandInPackage]:
    """``packages`` with each ``slurm-smd*`` stand-in of ``release`` depending on Debian's
    package of the same release at the version this machine has installed."""
    done = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "slurmd"], capture_output=True, text=True)
    debian = done.stdout.strip()
    if done.returncode != 0 or not debian.startswith(f"{release}-"):
        raise LabUnavailable(f"the golden image's slurmd comes from Debian's build of Slurm {release}; this machine "
                             f"has slurmd {debian or 'not installed'}")
    out = []
    for package in packages:
        if package.name in DEBIAN_SLURM and package.version == f"{release}-1":
            package = StandInPackage(package.name, package.version,
                                     depends=(f"{DEBIAN_SLURM[package.name]} (= {debian})",),
                                     description=f"SchedMD's {package.name} (lab: Debian's build of the same release).")
        out.append(package)
    return out
