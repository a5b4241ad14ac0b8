"""`fleetspec facts collect` over the real lab hosts (namespaced Debian nodes with sshd,
tests/lab/conftest.py), one host unreachable: the others' facts are written, the missing
one is named and the run exits 1; `verify --facts` and `import --facts` read the result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from fleetspec.lab import Lab
from fleetspec.verify.run import load_facts_dir
from tests.lab.conftest import lab, lab_base, lab_nodes, lab_repo  # noqa: F401  (session fixtures)
from tests.verify.test_lab import LAB_SPEC

pytestmark = pytest.mark.lab


def fleetspec(*args: str):
    from fleetspec.cli import app

    return CliRunner().invoke(app, list(args))


def test_collect_from_the_lab_with_one_host_unreachable(lab: Lab, lab_nodes, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = lab.ansible_vars()
    # A node that is down: nothing listens where the inventory says it is.
    hosts["node-gone"] = {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_user": "nobody"}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    out = tmp_path / "facts"

    result = fleetspec("facts", "collect", "-i", str(inventory), "--out", str(out), "--connect-timeout", "5")
    assert result.exit_code == 1, result.output
    assert "no facts node-gone: unreachable:" in result.stderr and "1 node(s) without facts: node-gone" \
        in result.stderr
    assert "wrote facts of 2 of 3 node(s)" in result.stdout
    assert sorted(p.name for p in out.glob("*.json")) == ["node-a.json", "node-b.json"]
    assert "written by 'fleetspec facts collect'" in (out / ".fleetspec-render").read_text()  # render's marker file
    for name in ("node-a", "node-b"):  # each node's own document, as the collector printed it
        doc = json.loads((out / f"{name}.json").read_text())
        assert (doc["schema"], doc["hostname"]) == ("fleetspec.io/facts/v1", name)
    plain = {line.split(" ", 1)[1] for line in result.stderr.splitlines() if line[:1].isdigit()}
    assert {"node-a: ok", "node-b: ok"} <= plain  # one plain line per node off a terminal, "2/3 node-a: ok"

    facts, problems = load_facts_dir(out)  # what import --facts reads
    assert sorted(facts) == ["node-a", "node-b"] and problems == {}
    spec = tmp_path / "lab.yaml"
    spec.write_text(LAB_SPEC)
    verified = fleetspec("verify", str(spec), "--facts", str(out), "--format", "json")
    nodes = {n["hostname"]: {c["component"]: c for c in n["checks"]} for n in json.loads(verified.stdout)["nodes"]}
    assert nodes["node-a"]["facts"]["message"].startswith("facts collected on node-a")
    assert nodes["node-b"]["facts"]["status"] == "ok"

    # A bare hostlist, each host reached by name with the user's SSH settings (here the
    # lab's ssh_config), a name nothing resolves among them; DIR is replaced as a whole.
    monkeypatch.setenv("ANSIBLE_SSH_ARGS", f"-F {lab.ssh.config}")
    again = fleetspec("facts", "collect", "--hosts", "node-a,node-b,node-nowhere", "--out", str(out),
                      "--connect-timeout", "5")
    assert again.exit_code == 1, again.output
    assert "1 node(s) without facts: node-nowhere" in again.stderr
    assert sorted(p.name for p in out.glob("*.json")) == ["node-a.json", "node-b.json"]
