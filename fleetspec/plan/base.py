"""``plan --base``: the spec a pull request starts from, as a file or as a git revision.

``--base old.yaml`` reads that file. Anything else that is not an existing file is a git
revision (``origin/main``, a tag, a commit): the spec's own path is read from that
revision with ``git show REV:PATH`` (https://git-scm.com/docs/git-show: "git show
next~10:Documentation/README"), so a pipeline plans a pull request against its target
branch without a second checkout. A spec that the revision does not have is a new fleet:
the plan is then made against nothing.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


class BaseError(Exception):
    """The base cannot be read; the message says why and what to do."""


@dataclass(frozen=True)
class BaseSpec:
    name: str  # for findings and the plan's "against ..." ("spec old.yaml", "origin/main:fleets/a.yaml")
    text: str | None  # None: the revision has no such file (a new fleet)
    path: Path | None = None  # set when the base is a file


def resolve_base(spec: Path, base: str) -> BaseSpec:
    candidate = Path(base)
    if candidate.is_file():
        return BaseSpec(f"spec {base}", None, candidate)
    git = shutil.which("git")
    if git is None:
        raise BaseError(f"--base {base}: no such file, and git is not installed to read it as a revision")
    spec = Path(spec).resolve()
    top = _git(git, spec.parent, "rev-parse", "--show-toplevel")
    if top is None:
        raise BaseError(f"--base {base}: no such file, and {spec.parent} is not in a git repository")
    root = Path(top.strip())
    relative = spec.relative_to(root.resolve()).as_posix()
    if _git(git, root, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}") is None:
        raise BaseError(f"--base {base}: neither a file nor a revision git knows here. In CI, fetch it first "
                        f"(actions/checkout with fetch-depth: 0, or 'git fetch origin main')")
    name = f"{base}:{relative}"
    if _git(git, root, "cat-file", "-e", name) is None:
        return BaseSpec(name, None)
    text = _git(git, root, "show", name)
    if text is None:
        raise BaseError(f"--base {base}: git could not read {name}")
    return BaseSpec(name, text)


def _git(git: str, cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run([git, "-C", str(cwd), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None
