"""The enroot.conf the enroot_pyxis role writes, read the way Enroot reads it, by a job user.

A Slurm job inherits XDG_RUNTIME_DIR=/run/user/<uid> from the submitting shell, and the job
has no login session, so that directory does not exist on the compute node; Enroot's
default ENROOT_RUNTIME_PATH (${XDG_RUNTIME_DIR}/enroot) then fails with "mkdir: cannot create
directory '/run/user/<uid>'". The role's enroot.conf must give every user their own
directories under world-writable, sticky parents instead.

ENROOT_CONFIG below is a verbatim copy of the configuration block of NVIDIA/enroot's
``enroot.in`` (config::export, config::init, the path defaults and the final mkdir; read
at commit 08647f1e): the stand-in runs the vendor's own code, with the system config path
pointed at the rendered file.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import jinja2
import pytest
import yaml

ROLE = Path(__file__).resolve().parents[2] / "playbooks" / "roles" / "enroot_pyxis"

ENROOT_CONFIG = r'''
set -euo pipefail
config::export() {
    [ -n "${3-}" ] && export "$1=$2" || export "$1=${!1:-$2}"
}
config::init() {
    local -r file="$1" overwrite="${2-}"
    if [ -s "${file}" ] && ! "${BASH}" -n "${file}" > /dev/null 2>&1; then
        printf "Invalid configuration file: %s\n" "${file}"
        exit 1
    fi
    if [ -e "${file}" ]; then
        while IFS=$' \t=' read -r key value; do
            if [[ "${key}" =~ ^ENROOT_[[:upper:]_]+$ ]] ||
               [[ "${key}" =~ ^SSL_CERT_(DIR|FILE)$ ]] ||
               [[ "${key}" =~ ^(all|no|http|https)_proxy$ ]]; then
                config::export "${key}" "$(eval echo "${value}")" "${overwrite}"
            fi
        done < "${file}"
   fi
}
config::init "$1"
config::export XDG_DATA_HOME           "${HOME:-$(echo ~)}/.local/share"
config::export XDG_CONFIG_HOME         "${HOME:-$(echo ~)}/.config"
config::export XDG_CACHE_HOME          "${HOME:-$(echo ~)}/.cache"
config::export XDG_RUNTIME_DIR         "/run"
config::export ENROOT_RUNTIME_PATH     "${XDG_RUNTIME_DIR}/enroot"
config::export ENROOT_CACHE_PATH       "${XDG_CACHE_HOME}/enroot"
config::export ENROOT_DATA_PATH        "${XDG_DATA_HOME}/enroot"
(umask 077 && mkdir -p "${ENROOT_CACHE_PATH}" "${ENROOT_DATA_PATH}" "${ENROOT_RUNTIME_PATH}")
echo "${ENROOT_RUNTIME_PATH}|${ENROOT_CACHE_PATH}|${ENROOT_DATA_PATH}"
'''


def _role_task(name: str) -> dict:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    return next(t for t in tasks if t["name"] == name)


def _rendered_conf(parents: dict[str, str]) -> str:
    """The role's enroot.conf content, templated as Ansible would with these parents."""
    content = _role_task("Configure Enroot's per-user paths")["ansible.builtin.copy"]["content"]
    # Ansible keeps a template's trailing newline (Templar: preserve_trailing_newlines); it
    # matters here, since Enroot's `read` loop drops a last line without one.
    template = jinja2.Template(content, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return template.render(**parents)


def _as_job_user(tmp_path: Path, conf: Path) -> subprocess.CompletedProcess:
    script = tmp_path / "enroot-config.sh"
    script.write_text(ENROOT_CONFIG)
    script.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent",
           "XDG_RUNTIME_DIR": "/run/user/65534"}  # what the submitting shell exports
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "bash", str(script), str(conf)],
                          env=env, capture_output=True, text=True, check=False)


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A directory the job user can traverse (pytest's own tmp root is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="fleetspec-enroot-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def parents(tmp_path: Path) -> dict[str, str]:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.fail("this test runs Enroot's config code as another user: it needs root and setpriv")
    out = {}
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    for key in ("fleetspec_enroot_runtime_parent", "fleetspec_enroot_cache_parent",
                "fleetspec_enroot_data_parent"):
        assert key in defaults
        path = tmp_path / key
        path.mkdir(mode=0o1777)
        path.chmod(0o1777)  # what the role's file task sets
        out[key] = str(path)
    return out


def test_a_job_user_gets_its_own_enroot_directories(tmp_path: Path, parents: dict[str, str]) -> None:
    conf = tmp_path / "enroot.conf"
    conf.write_text(_rendered_conf(parents))
    conf.chmod(0o644)
    result = _as_job_user(tmp_path, conf)
    assert result.returncode == 0, result.stderr
    runtime, cache, data = result.stdout.strip().split("|")
    assert runtime == f"{parents['fleetspec_enroot_runtime_parent']}/user-65534"
    assert cache == f"{parents['fleetspec_enroot_cache_parent']}/group-65534"
    assert data == f"{parents['fleetspec_enroot_data_parent']}/user-65534"
    for path in (runtime, cache, data):
        assert Path(path).stat().st_uid == 65534
    assert pwd.getpwuid(65534)  # the user exists: the check ran as a real account


def test_without_the_role_enroot_fails_on_run_user(tmp_path: Path, parents: dict[str, str]) -> None:
    """The failure the role prevents, reproduced: no enroot.conf, Enroot's defaults."""
    result = _as_job_user(tmp_path, tmp_path / "missing.conf")
    assert result.returncode != 0
    assert "/run/user/65534" in result.stderr
