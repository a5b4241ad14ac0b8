"""The node side of the Slurm-native rollout on a real lab host (#30 item 2).

The ``fleetspec_converge`` role goes onto node-a of the session lab over SSH (the real
role, through ansible-runner); then the node is handed its partition's bundle, rendered
and signed for it with a real ``ssh-keygen -Y sign``, and the installed
``fleetspec-converge.service`` is started under the node's own systemd: it verifies the
signature against the allowed_signers the role installed, runs the fleet's real roles
locally (``ansible-playbook -c local``, the node's own ansible-core) against the lab's
stand-in apt repository, which installs and holds the tuple, and writes the result.
A tampered bundle, one signed by a foreign key and a replayed older version are refused
on the node before anything runs, and slurmd (a stand-in unit behind the role's drop-in)
does not start after a refused converge.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetspec.apply.ansible import PLAYBOOKS, run_playbook
from fleetspec.apply.bundle import publish
from fleetspec.compile.ir import Fleet
from fleetspec.lab import Lab
from fleetspec.lab.fleet import LAB_MIRROR
from fleetspec.packages import packages_for, slurm_packages
from fleetspec.pipeline import compile_file
from fleetspec.render.ansible import render_ansible
from fleetspec.render.converge import render_converge
from fleetspec.render.slurm import render_slurm
from tests.lab.conftest import LAB_CONVERGE_STACK, LAB_SLURM, lab, lab_base, lab_mode, lab_nodes, lab_repo  # noqa: F401 (fixtures)

pytestmark = pytest.mark.lab

NODE = "node-a"
BUNDLES = "/var/lib/fleetspec-bundles"
RESULT = f"/var/lib/fleetspec/results/{NODE}.json"
LOG = "/var/lib/fleetspec/converge.log"
# tests/lab/conftest.py LAB_CONVERGE_STACK: the session repository carries its pins.
SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: lab}}
spec:
  os: ubuntu-24.04
  stacks:
    {stack}: {{rocm: "{rocm}", rccl: "{rccl}"}}
  slurm:
    version: "{slurm}"
    controllers: ctl-01
    converge:
      bundles: {bundles}
      public_key: "{key}"
  racks:
    - name: r01
      nodes:
        - {{hosts: {node}, gpu: {{model: mi300x, count: 1}}, stack: {stack}, scheduler: slurm}}
"""
# Stand-in slurmd: what the role's drop-in guards (the stand-in Slurm packages ship no unit).
SLURMD_UNIT = "[Unit]\nDescription=stand-in slurmd\n[Service]\nExecStart=/bin/sleep infinity\n"


@dataclasses.dataclass
class Node:
    lab: Lab
    fleet: Fleet
    work: Path
    key: Path

    def ssh(self, *command: str, data: bytes | None = None, check: bool = True,
            timeout: int = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.lab.ssh.argv(NODE, *command), input=data, capture_output=True, timeout=timeout)
        assert not check or proc.returncode == 0, proc.stderr.decode(errors="replace")
        return proc

    def hand(self, version: int, key: Path | None = None, tamper: bool = False) -> None:
        """Publish ``version`` signed with ``key`` and put it where the node fetches it."""
        out = self.work / f"mirror-{version}-{(key or self.key).name}-{tamper}"
        published = publish(self.fleet, self.fleet.nodes[0].partition, version, f"file:{key or self.key}",
                            self.work, PLAYBOOKS, out)
        data = published.bundle.read_bytes()
        if tamper:  # one byte of the signed gzip stream, after the header
            data = data[:100] + bytes([data[100] ^ 0x01]) + data[101:]
        name = f"{self.fleet.name}-{self.fleet.nodes[0].partition}.tar.gz"
        self.ssh("mkdir", "-p", BUNDLES)
        self.ssh("sh", "-c", f"cat > {BUNDLES}/{name}", data=data)
        self.ssh("sh", "-c", f"cat > {BUNDLES}/{name}.sig", data=published.signature.read_bytes())

    def converge(self) -> int:
        """Start the installed unit (systemd in the node), else run its ExecStart as it would."""
        if lab_mode() == "nspawn":
            self.ssh("systemctl", "stop", "slurmd.service", "fleetspec-converge.service")
            self.ssh("systemctl", "reset-failed", check=False)
            return self.ssh("systemctl", "start", "fleetspec-converge.service", check=False, timeout=900).returncode
        return self.ssh("sh", "-c", ". /etc/fleetspec/converge.env && PYTHONPATH=/usr/local/lib/fleetspec-converge "
                        "python3 -s -m fleetspec.node_side.converge --host $FLEETSPEC_HOST --fleet $FLEETSPEC_FLEET "
                        "--partition $FLEETSPEC_PARTITION --bundle "
                        "$FLEETSPEC_BUNDLE --result-dir $FLEETSPEC_RESULTS", check=False, timeout=900).returncode

    def result(self) -> dict:
        return json.loads(self.ssh("cat", RESULT).stdout)

    def log_stamp(self) -> str:
        return self.ssh("stat", "-c", "%Y.%s", LOG).stdout.decode().strip()


def keygen(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return path


@pytest.fixture(scope="module")
def node(lab: Lab, lab_nodes, tmp_path_factory: pytest.TempPathFactory) -> Node:
    """node-a with the fleetspec_converge role applied over SSH, nothing of the tuple yet."""
    work = tmp_path_factory.mktemp("converge")
    key = keygen(work / "site-key")
    spec = work / "lab.yaml"
    stack = LAB_CONVERGE_STACK
    spec.write_text(SPEC.format(slurm=LAB_SLURM, bundles=BUNDLES, node=NODE, stack=stack.name, rocm=stack.rocm,
                                rccl=stack.rccl,
                                key=(work / "site-key.pub").read_text().strip()))
    compiled = compile_file(spec)
    assert compiled.valid and compiled.fleet is not None, compiled.findings
    fleet = dataclasses.replace(compiled.fleet, package_mirror=LAB_MIRROR)
    out = work / "render"
    for rel, text in {**render_ansible(fleet), **render_slurm(fleet), **render_converge(fleet)}.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    conn = out / "ansible" / "lab-hosts.yml"
    conn.write_text(yaml.safe_dump({"all": {"hosts": {NODE: lab.ansible_vars()[NODE]}}}))
    play = work / "play"
    play.mkdir()
    (play / "converge-role.yml").write_text(
        "- hosts: all\n  gather_facts: true\n  gather_subset: [min]\n  roles: [fleetspec_converge]\n")
    result = run_playbook([out / "ansible" / "inventory.yml", conn], playbook="converge-role.yml", project_dir=play,
                          limit=[NODE], work_dir=work / "runs",
                          envvars={"ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles")},
                          extravars={"fleetspec_converge_source": str(PLAYBOOKS.parent)})
    assert result.ok, result.hosts
    n = Node(lab, fleet, work, key)
    if lab_mode() == "nspawn":
        n.ssh("sh", "-c", "cat > /etc/systemd/system/slurmd.service", data=SLURMD_UNIT.encode())
        n.ssh("systemctl", "daemon-reload")
    return n


def pins(fleet: Fleet) -> dict[str, str]:
    """The tuple's pins and the Slurm node's (the slurm role ran from the bundle too)."""
    n = fleet.nodes[0]
    tuple_pins = [p for p in packages_for(fleet.stack(n.stack), fleet.os, [n.gpu]) if p.condition is None]
    return {p.name: p.version for p in (*tuple_pins, *slurm_packages(LAB_SLURM, ["slurm_node"]))}


def test_the_role_installs_the_node_side(node: Node) -> None:
    rendered = node.work / "render" / "ansible" / "converge"
    assert node.ssh("cat", "/etc/fleetspec/allowed_signers").stdout.decode() == (
        rendered / "allowed_signers").read_text()
    env = node.ssh("cat", "/etc/fleetspec/converge.env").stdout.decode()
    assert f"FLEETSPEC_HOST={NODE}\n" in env
    assert f"FLEETSPEC_FLEET={node.fleet.name}\nFLEETSPEC_PARTITION={node.fleet.nodes[0].partition}\n" in env
    assert f"FLEETSPEC_BUNDLE={BUNDLES}/lab-{node.fleet.nodes[0].partition}.tar.gz\n" in env
    assert "FLEETSPEC_RESULTS=/var/lib/fleetspec/results\n" in env
    assert f"FLEETSPEC_REQUESTS={BUNDLES}/requests\n" in env  # where apply --bundle-dir puts requests
    node.ssh("env", "PYTHONPATH=/usr/local/lib/fleetspec-converge", "python3", "-s", "-m",
             "fleetspec.node_side.converge", "--help")
    node.ssh("ansible-playbook", "--version")
    assert node.ssh("dpkg-query", "-W", "rccl", check=False).returncode != 0  # nothing of the tuple yet
    if lab_mode() == "nspawn":
        assert node.ssh("systemctl", "is-enabled", "fleetspec-converge.service").stdout.strip() == b"enabled"
        assert node.ssh("systemctl", "is-enabled", "fleetspec-converge-request.timer").stdout.strip() == b"enabled"
        shown = node.ssh("systemctl", "show", "-p", "Requires", "-p", "After", "slurmd.service").stdout.decode()
        assert "fleetspec-converge.service" in shown.split("Requires=")[1].split("\n")[0]


def test_a_signed_bundle_converges_the_node_with_its_real_roles(node: Node) -> None:
    node.hand(2)
    assert node.converge() == 0, node.ssh("cat", LOG, check=False).stdout.decode()[-3000:]
    result = node.result()
    assert result["ok"] and result["error"] is None and result["version"] == 2, result
    collected = {p["name"]: p for p in result["facts"]["packages"]["installed"]}  # what verify compares
    for name, version in pins(node.fleet).items():
        status = node.ssh("dpkg-query", "-W", "-f=${Version} ${Status}", name).stdout.decode()
        assert status == f"{version} hold ok installed", (name, status)
        assert (collected[name]["version"], collected[name]["held"]) == (version, True), collected.get(name)
    if lab_mode() == "nspawn":  # slurmd starts behind a converged node
        node.ssh("systemctl", "start", "slurmd.service")
        assert node.ssh("systemctl", "is-active", "slurmd.service").stdout.strip() == b"active"


@pytest.mark.parametrize(("case", "said"), [
    ("tampered", "bad bundle signature"),
    ("foreign key", "bad bundle signature"),
    ("replayed older version", "older than version 2"),
])
def test_a_bad_bundle_is_refused_on_the_node_before_anything_runs(node: Node, case: str, said: str) -> None:
    if case == "tampered":
        node.hand(3, tamper=True)
    elif case == "foreign key":
        foreign = node.work / "foreign-key"
        node.hand(3, key=foreign if foreign.exists() else keygen(foreign))
    else:
        node.hand(1)
    before = node.log_stamp()
    assert node.converge() != 0
    result = node.result()
    assert not result["ok"] and said in result["error"], result
    assert node.log_stamp() == before  # ansible-playbook never ran
    if lab_mode() == "nspawn":
        assert node.ssh("systemctl", "start", "slurmd.service", check=False).returncode != 0
        assert node.ssh("systemctl", "is-active", "slurmd.service", check=False).stdout.strip() != b"active"
