"""Shared test fixtures: paths, the test data the repository carries, golden files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
EXAMPLES = ROOT / "examples"
GOLDEN = Path(__file__).resolve().parent / "golden"
# The project's shared/ tree beside the checkout (CI lays it there): other people's files the
# tests read and serve in place but the repository must not carry (their READMEs ask so): real
# clusters' Slurm files (brownfield/, each case's SOURCE.md) and four real BMCs' Redfish
# captures (redfish/mockups/, each folder's SOURCE).
SHARED = ROOT.parent / "shared"


def unavailable(reason: str) -> NoReturn:
    """Something CI provides is missing (a system package scripts/test installs, the shared/
    tree CI lays beside the clone): skip where it cannot be had (not root, no apt, a user's
    clone without shared/), fail under CI (CI set), where a skip would hide a broken machine
    behind a green run."""
    if os.environ.get("CI"):
        pytest.fail(f"required under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def _cli_crash_is_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """CliRunner turns an uncaught exception into exit code 1 with no traceback in the
    output, so a crash would pass every ``exit_code == 1`` check meant for a handled
    error. Every in-process command run by any test refuses one here instead."""
    from typer.testing import CliRunner

    invoke = CliRunner.invoke

    def checked(self, *args, **kwargs):
        result = invoke(self, *args, **kwargs)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise AssertionError(f"the command crashed: {result.exception!r}") from result.exception
        return result

    monkeypatch.setattr(CliRunner, "invoke", checked)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite golden files from the current output instead of comparing",
    )


def require_shared(relative: str) -> Path:
    """A path under tests/data: upstream CRDs, the real H200 node's outputs and DESIGN.md,
    copied from the project's shared/ tree with their source notes (tests/data/README.md).
    The repository carries them, so a fresh clone runs every test: a missing one fails."""
    path = DATA / relative
    if not path.exists():
        pytest.fail(f"tests/data/{relative} is missing: the repository carries its test data")
    return path


def shared_tree(relative: str) -> Path:
    """A path under the project's shared/ tree beside the checkout (``brownfield/...``,
    ``redfish/mockups/...``): other people's files, read and served in place, never copied
    into the repository. Missing fails under CI (CI lays shared/ beside the clone) and skips
    in a user's clone without it, as shared/README.md allows."""
    path = SHARED / relative
    if not path.exists():
        unavailable(f"{path} is missing: this test reads the project's shared/{relative} beside the checkout")
    return path


class Golden:
    """Compare rendered trees with files under tests/golden/, or rewrite them."""

    def __init__(self, update: bool) -> None:
        self.update = update

    def check_tree(self, name: str, files: dict) -> None:
        """``files``: {relative path: text}. The golden tree must match exactly."""
        base = GOLDEN / name
        expected = (
            {p.relative_to(base).as_posix(): p for p in base.rglob("*") if p.is_file()}
            if base.exists()
            else {}
        )
        actual = {str(k): v for k, v in files.items()}
        if self.update:
            for rel, path in expected.items():
                if rel not in actual:
                    path.unlink()
            for rel, text in actual.items():
                target = base / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
            return
        assert expected, f"no golden tree {base}; run pytest --update-goldens"
        assert sorted(actual) == sorted(expected), "file set differs from golden tree"
        for rel, text in actual.items():
            assert text == expected[rel].read_text(), f"{name}/{rel} differs from golden"

    def check_text(self, name: str, text: str) -> None:
        path = GOLDEN / name
        if self.update:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            return
        assert path.exists(), f"no golden file {path}; run pytest --update-goldens"
        assert text == path.read_text(), f"{name} differs from golden"


@pytest.fixture(scope="session")
def slurm_installed() -> None:
    """Debian's slurmctld/slurmd/slurm-client/munge; skip where they cannot be installed
    (not root, no apt), fail under CI where the test script provides them."""
    from fleetspec.lab.slurm import SlurmUnavailable, ensure_slurm

    try:
        ensure_slurm()
    except SlurmUnavailable as exc:
        unavailable(f"real Slurm unavailable: {exc}")


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    return Golden(request.config.getoption("--update-goldens"))


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server on a unix socket for the whole session (tests/postgres_server.py);
    skip where Debian's postgresql is not installed, fail under CI where scripts/test installs it."""
    from tests.postgres_server import server_bin, start_server

    bin_dir = server_bin()
    if bin_dir is None:
        unavailable("PostgreSQL unavailable: install Debian's postgresql (scripts/test does)")
    import psycopg  # noqa: F401  (the test extra carries it: missing, the session fails here)
    server = start_server(bin_dir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def postgres_url(postgres_server) -> str:
    """A fresh database on the session's server, as a postgresql:// state URL."""
    return postgres_server.new_database()
