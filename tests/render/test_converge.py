"""slurm.converge (#30 item 2): the spec's trust boundary, the rendered node side and the
role that installs it (the lab run is tests/lab/test_converge.py)."""

from __future__ import annotations

import base64
import dataclasses
import subprocess
from pathlib import Path, PurePosixPath

import pytest
import yaml

from fleetspec.apply.ansible import PLAYBOOKS
from fleetspec.pipeline import compile_file
from fleetspec.render import render_all
from fleetspec.render.bundle import CONVERGE_ENV, CONVERGE_LIB, CONVERGE_MODULES, render_bundle
from fleetspec.render.converge import render_converge
from fleetspec.ssh_keys import public_key_problem

ROLE = PLAYBOOKS / "roles" / "fleetspec_converge"
SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: lab}}
spec:
  os: ubuntu-24.04
  stacks:
    cdna3: {{rocm: "7.0.2", rccl: "2.26.6"}}
  slurm:
    version: "25.11.8"
    mode: {mode}
    controllers: ctl-01
    converge:
      bundles: {bundles}
      public_key: "{key}"
  racks:
    - name: r01
      nodes:
        - {{hosts: node-a, gpu: {{model: mi300x, count: 1}}, stack: cdna3, scheduler: slurm}}
"""


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    work = tmp_path_factory.mktemp("keys")
    out = {}
    for kind, args in (("ed25519", ["-t", "ed25519"]), ("ecdsa", ["-t", "ecdsa", "-b", "384"]),
                       ("rsa", ["-t", "rsa", "-b", "3072"])):
        subprocess.run(["ssh-keygen", "-q", *args, "-N", "", "-C", "site@fleet", "-f", str(work / kind)], check=True)
        out[kind] = (work / f"{kind}.pub").read_text().strip()
        out[f"{kind}-private"] = (work / kind).read_text()
    return out


def spec(tmp_path: Path, key: str, bundles: str = "https://mirror.example/fleetspec", mode: str = "native") -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(SPEC.format(key=key.replace('"', '\\"').replace("\n", "\\n"), bundles=bundles, mode=mode))
    return path


def errors(path: Path) -> list[str]:
    result = compile_file(path)
    return [f"{f.line}:{f.column} {f.message}" for f in result.located() if f.severity.name == "ERROR"]


def test_ssh_keys_accepts_what_ssh_keygen_writes_and_nothing_else(keys: dict[str, str]) -> None:
    assert public_key_problem(keys["ed25519"]) is None and public_key_problem(keys["ecdsa"]) is None
    kind, blob, _ = keys["ed25519"].split(" ")
    assert public_key_problem(f"{kind} {blob}") is None
    assert "not accepted" in public_key_problem(keys["rsa"])
    assert "private key" in public_key_problem(keys["ed25519-private"])
    assert "options" in public_key_problem(f"cert-authority {keys['ed25519']}")
    assert "holds a 'ecdsa-sha2-nistp384' key" in public_key_problem(f"{kind} {keys['ecdsa'].split(' ')[1]}")
    raw = base64.b64decode(blob)
    assert "truncated" in public_key_problem(f"{kind} {base64.b64encode(raw[:-1]).decode()}")
    assert "decode" in public_key_problem(f"{kind} {blob[:-2]}!!")
    assert "comment" in public_key_problem(f"{kind} {blob} bad$comment")
    assert "one line" in public_key_problem(f"{kind} {blob}\n{kind} {blob}")


@pytest.mark.parametrize(("bundles", "key", "said"), [
    ("http://mirror.example/x", "ed25519", "plain http is refused"),
    ("/shared/../etc", "ed25519", "'.' or '..' segments"),
    ("https://mirror.example/a b", "ed25519", "not a bundle location"),
    ("/shared/bundles", "rsa", "key type 'ssh-rsa' is not accepted"),
    ("/shared/bundles", "ed25519-private", "this is a private key"),
])
def test_bad_converge_settings_are_located_errors(tmp_path: Path, keys: dict[str, str], bundles: str, key: str,
                                                  said: str) -> None:
    found = errors(spec(tmp_path, keys[key], bundles))
    line = 13 if "http" in said or "segments" in said or "location" in said else 14
    assert any(e.startswith(f"{line}:") and said in e for e in found), found


def test_converge_needs_slurmd_on_the_host(tmp_path: Path, keys: dict[str, str]) -> None:
    found = errors(spec(tmp_path, keys["ed25519"], mode="slinky"))
    assert any(e.startswith("12:5 ") and "mode: native" in e for e in found), found


def test_the_node_side_is_rendered_beside_the_inventory_and_never_bundled(tmp_path: Path,
                                                                           keys: dict[str, str]) -> None:
    result = compile_file(spec(tmp_path, keys["ed25519"], "file:///srv/bundles/"))
    assert result.valid, result.findings
    fleet = result.fleet
    files = render_all(fleet)
    root = PurePosixPath("ansible/converge")
    assert sorted(p for p in files if p.parts[:2] == root.parts) == [
        root / "allowed_signers", root / "fleetspec-converge-request.service",
        root / "fleetspec-converge-request.timer", root / "fleetspec-converge.service",
        root / "slurmd.service.d/10-fleetspec-converge.conf"]
    kind, blob, _ = keys["ed25519"].split(" ")
    assert files[root / "allowed_signers"].splitlines()[-1] == f'fleetspec namespaces="fleetspec-bundle" {kind} {blob}'
    unit = files[root / "fleetspec-converge.service"]
    assert f"EnvironmentFile={CONVERGE_ENV}" in unit and f"PYTHONPATH={CONVERGE_LIB}" in unit
    assert "--host ${FLEETSPEC_HOST}" in unit and "--result-dir ${FLEETSPEC_RESULTS}" in unit
    request = files[root / "fleetspec-converge-request.service"]
    assert "--requests ${FLEETSPEC_REQUESTS}" in request and "--host ${FLEETSPEC_HOST}" in request
    assert "--result-dir ${FLEETSPEC_RESULTS}" in request
    group = yaml.safe_load(files[PurePosixPath("ansible/group_vars/slurm_node.yml")])
    assert group["fleetspec_converge"] == {"bundles": "file:///srv/bundles", "results": "/var/lib/fleetspec/results"}
    bundle = render_bundle(fleet, fleet.nodes[0].partition, 1, {})
    import gzip
    import io
    import tarfile

    names = tarfile.open(fileobj=io.BytesIO(gzip.decompress(bundle))).getnames()
    assert not [n for n in names if n.startswith("ansible/converge")]  # a bundle never replaces its own trust
    assert render_converge(dataclasses.replace(fleet, slurm=dataclasses.replace(fleet.slurm, converge=None))) == {}
    bad = dataclasses.replace(fleet.slurm.converge, public_key=f"{kind} {blob}\nssh-ed25519 AAAA")
    with pytest.raises(ValueError, match="one line"):
        render_converge(dataclasses.replace(fleet, slurm=dataclasses.replace(fleet.slurm, converge=bad)))


def test_the_role_installs_the_modules_and_paths_the_unit_uses() -> None:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert tuple(defaults["fleetspec_converge_modules"]) == CONVERGE_MODULES
    assert (defaults["fleetspec_converge_lib"], defaults["fleetspec_converge_env"]) == (CONVERGE_LIB, CONVERGE_ENV)
    site = yaml.safe_load((PLAYBOOKS / "site.yml").read_text())
    slurm = next(p for p in site if p["name"] == "Slurm (native mode)")
    role = next(r for r in slurm["roles"] if r["role"] == "fleetspec_converge")
    assert "'slurm_node' in group_names" in role["when"]
    assert "(inventory_dir ~ '/converge/allowed_signers') is file" in role["when"]
