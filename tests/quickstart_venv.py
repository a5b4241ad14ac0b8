"""A virtual environment made exactly as README's quick start makes it, offline.

The README loop must run from what the quick start installs, not from the test
environment (issue #28: the quick start left out the ``ansible`` extra and the loop died
at apply, while the loop test passed inside the test environment). So the quick start's
own install line (``python3 -m venv .venv && . .venv/bin/activate && pip install ...``,
read from README.md) runs in a copy of the source tree, with pip pointed at a local
wheelhouse and no index: every wheel in it is repacked from a distribution this test
environment already has installed (its files as its RECORD lists them), limited to what
``fleetspec`` and the extras the line names require, transitively. A line that leaves out
an extra the loop needs installs without it, and the loop then fails as a user's would.

Traffic: none (``PIP_NO_INDEX``). Cost: repacking about twenty distributions and one pip
install, about half a minute.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata as metadata
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
_INSTALL = re.compile(r"^(python3 -m venv \S+ && \. \S+/bin/activate && pip install [^&]+?)\s*&&", re.M)


def quickstart_install_line(readme: Path = ROOT / "README.md") -> str:
    """The quick start's venv and install commands, as README writes them."""
    found = _INSTALL.search(readme.read_text())
    if found is None:
        raise AssertionError("README's quick start has no 'python3 -m venv ... && pip install ...' line")
    return found.group(1)


def _extras(line: str) -> set[str]:
    target = shlex.split(line.rsplit("pip install", 1)[1])[-1]
    found = re.search(r"\[([^\]]*)\]", target)
    return {e.strip() for e in found.group(1).split(",")} if found else set()


def _closure(extras: set[str]) -> list[metadata.Distribution]:
    """The installed distributions fleetspec[extras] needs, transitively (setuptools for the build)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    for extra in sorted(extras):
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    # the build backend, for pip's isolated build (the test extra pins one new enough)
    wanted += [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]]
    seen: dict[str, metadata.Distribution] = {}
    queue: list[tuple[Requirement, str]] = [(r, "") for r in wanted]
    while queue:
        req, extra = queue.pop()
        if req.marker is not None and not req.marker.evaluate({**default_environment(), "extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            for e in req.extras:  # extras asked for later still bring their requirements
                queue += [(Requirement(r), e) for r in seen[name].requires or []]
            continue
        dist = metadata.distribution(req.name)
        seen[name] = dist
        for r in dist.requires or []:
            queue.append((Requirement(r), ""))
            queue += [(Requirement(r), e) for e in req.extras]
    return list(seen.values())


def _wheel(dist: metadata.Distribution, into: Path) -> Path:
    """``dist`` as installed, packed back into a wheel (scripts left to pip's entry points)."""
    info = Path(dist._path)  # type: ignore[attr-defined]
    site = info.parent
    tags = [line.split(":", 1)[1].strip().split("-") for line in dist.read_text("WHEEL").splitlines()
            if line.startswith("Tag:")]  # py2-none-any and py3-none-any: the name says py2.py3-none-any
    tag = "-".join(".".join(dict.fromkeys(t[i] for t in tags)) for i in range(3))
    name = info.name[: -len(".dist-info")]
    path = into / f"{name}-{tag}.whl"
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as whl:
        for file in dist.files or []:
            rel = file.as_posix()
            if rel.startswith("..") or "__pycache__" in rel or rel.endswith(".pyc") or rel.endswith("/RECORD") \
                    or Path(rel).name in ("INSTALLER", "REQUESTED", "direct_url.json"):
                continue
            data = (site / rel).read_bytes()
            whl.writestr(rel, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            writer.writerow([rel, f"sha256={digest}", len(data)])
        writer.writerow([f"{info.name}/RECORD", "", ""])
        whl.writestr(f"{info.name}/RECORD", record.getvalue())
    return path


def make_quickstart_venv(work: Path, line: str | None = None) -> tuple[Path, Path]:
    """A copy of the source tree in ``work/clone`` with the quick start's venv in it (or one
    made by ``line``), installed from a wheelhouse repacked from this environment. Returns
    (clone, venv bin)."""
    line = line or quickstart_install_line()
    wheels = work / "wheels"
    wheels.mkdir(parents=True)
    for dist in _closure(_extras(line)):
        _wheel(dist, wheels)
    clone = work / "clone"
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        source = ROOT / rel
        if source.is_file():
            (clone / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / rel)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))}
    env.update(PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}", PIP_NO_INDEX="1",
               PIP_FIND_LINKS=str(wheels), PIP_DISABLE_PIP_VERSION_CHECK="1")
    done = subprocess.run(["bash", "-c", line], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise AssertionError(f"the quick start's install failed: {line}\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    venv = clone / line.split("python3 -m venv ", 1)[1].split()[0]
    return clone, venv / "bin"


def quickstart_env(bindir: Path) -> dict[str, str]:
    """The environment of a shell that activated the quick start's venv: no PYTHONPATH, and
    not the test environment's programs (its ansible-playbook) on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    ours = (str(Path(sys.prefix)), str(ROOT))
    path = [p for p in env.get("PATH", "").split(":") if p and not p.startswith(ours)]
    env.update(PATH=":".join([str(bindir), *path]), VIRTUAL_ENV=str(bindir.parent))
    return env
