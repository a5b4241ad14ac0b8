"""pytest options for the shipped testinfra module (``fleetspec.verify.test_fleet_node``).

Registered through the ``pytest11`` entry point (or ``-p fleetspec.verify.pytest_plugin``),
because a module run with ``--pyargs`` cannot add command-line options itself.
Nothing here runs unless a test asks for the ``fleet`` fixture.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.compile.ir import Fleet


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fleetspec", "fleetspec verify (fleetspec.verify.test_fleet_node)")
    group.addoption("--fleet-spec", dest="fleet_spec", default=None, metavar="FILE",
                    help="the fleet spec the hosts are checked against")
    group.addoption("--fleet-node", dest="fleet_node", default=None, metavar="HOSTNAME",
                    help="the spec hostname of the (single) host, when its own name differs (e.g. local://)")


@pytest.fixture(scope="session")
def fleet(request: pytest.FixtureRequest) -> Fleet:
    """The compiled fleet of --fleet-spec; a spec with errors fails every test that needs it."""
    from fleetspec.findings import Severity
    from fleetspec.pipeline import compile_file

    spec = request.config.getoption("fleet_spec")
    if not spec:
        pytest.fail("give the fleet spec: --fleet-spec FILE", pytrace=False)
    compiled = compile_file(Path(spec))
    if compiled.fleet is None or not compiled.valid:
        errors = [f"{f.file}:{f.line}:{f.column}: {f.message}" for f in compiled.located() if f.severity >= Severity.ERROR]
        pytest.fail(f"{spec}: the spec has errors:\n" + "\n".join(errors), pytrace=False)
    return compiled.fleet


@pytest.fixture(scope="session")
def fleet_node_override(request: pytest.FixtureRequest) -> str | None:
    return request.config.getoption("fleet_node")
