"""EL fleets (#42): the pins render from the catalog's EL rows only, docs/packaging.md's EL
table is that data, and the apt-only node roles refuse an EL inventory before touching a node."""

from __future__ import annotations

import configparser
import json
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

import pytest
import yaml

from fleetspec.catalog.el import _signing_key, el_data, el_site_built, parse_nevra
from fleetspec.compile.ir import StackTuple
from fleetspec.findings import Severity
from fleetspec.pipeline import compile_file, compile_text
from fleetspec.render.ansible import el_repo_file, render_ansible
from tests.conftest import EXAMPLES, ROOT


@pytest.fixture(scope="module")
def rocky9() -> dict[PurePosixPath, str]:
    compiled = compile_file(EXAMPLES / "rocky9.yaml")
    assert compiled.valid, [(f.rule, f.message) for f in compiled.located()]
    return render_ansible(compiled.fleet)


def pins(files: dict[PurePosixPath, str], name: str) -> str:
    return files[PurePosixPath("ansible/pins") / name]


def test_rocky9_matches_golden(rocky9, golden) -> None:
    golden.check_tree("ansible/rocky9", {p.relative_to("ansible"): t for p, t in rocky9.items()})


def test_the_dnf_list_the_versionlock_and_the_module_of_an_el9_nvidia_stack(rocky9) -> None:
    dnf = pins(rocky9, "hopper-cu12.dnf").splitlines()
    # The driver family at epoch 3 with its dist tag; the fabric manager, CUDA and NCCL without one.
    assert "kmod-nvidia-open-dkms-3:580.82.07-1.el9" in dnf
    assert "nvidia-fabricmanager-580.82.07-1" in dnf and "libnccl-2.26.2-1+cuda12.8" in dnf
    assert "cuda-toolkit-12-8-12.8.1-1" in dnf and "datacenter-gpu-manager-4-core-1:4.5.2-1" in dnf
    assert not [p for p in dnf if p.startswith("nvidia-imex")]  # HGX H100: a fabric manager, no IMEX
    lock = [ln for ln in pins(rocky9, "hopper-cu12.versionlock").splitlines() if not ln.startswith("#")]
    assert len(lock) == len(dnf)
    assert "kmod-nvidia-open-dkms-3:580.82.07-1.el9.*" in lock and "libnccl-0:2.26.2-1+cuda12.8.*" in lock
    assert pins(rocky9, "hopper-cu12.module") == ("[nvidia-driver]\nname=nvidia-driver\nstream=580-open\nprofiles=\n"
                                                  "state=enabled\n")
    assert "baseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64\n" in pins(
        rocky9, "hopper-cu12.repo")
    assert not any(p.suffix in (".pref", ".list") for p in rocky9)  # no apt file for an EL fleet
    stack_vars = rocky9[PurePosixPath("ansible/group_vars/stack_hopper_cu12.yml")]
    assert "fleetspec_rdma_userspace:\n- rdma-core\n- libibverbs\n" in stack_vars  # EL names: no ibverbs-providers


def test_rocm_71_on_el9_pins_the_el8_builds_of_its_el9_tree(rocky9) -> None:
    assert pins(rocky9, "cdna3-rocm71.dnf").splitlines()[:2] == ["rocm-core-7.1.0.70100-20.el8",
                                                                  "rocm-7.1.0.70100-20.el8"]
    assert "baseurl=https://repo.radeon.com/rocm/el9/7.1/main\n" in pins(rocky9, "cdna3-rocm71.repo")
    assert PurePosixPath("ansible/pins/cdna3-rocm71.module") not in rocky9


def test_rccl_is_pinned_from_its_rocm_releases_tree(rocky9) -> None:
    """RCCL 2.27.7 ships with ROCm 7.1.0 and 7.1.1, each in its own tree: a 7.1.1 stack pins the
    7.1.1 tree's build (the one its .repo enables), never 7.1.0's from rocm/el9/7.1."""
    files = render_ansible(compile_text((EXAMPLES / "rocky9.yaml").read_text().replace('rocm: "7.1.0"',
                                                                                       'rocm: "7.1.1"')).fleet)
    assert pins(files, "cdna3-rocm71.dnf").splitlines()[-1] == "rccl-2.27.7.70101-38.el8"
    assert "baseurl=https://repo.radeon.com/rocm/rhel9/7.1.1/main\n" in pins(files, "cdna3-rocm71.repo")
    assert pins(rocky9, "cdna3-rocm71.dnf").splitlines()[-1] == "rccl-2.27.7.70100-20.el8"


def spec(os: str, driver: str) -> str:
    text = (EXAMPLES / "rocky9.yaml").read_text().replace("os: rocky-9", f"os: {os}")
    return text.replace('driver: "580.82.07"', f'driver: "{driver}"')


def test_el10_has_no_module_stream_and_other_literals() -> None:
    text = spec("almalinux-10", "580.167.08").replace(
        '      cuda: "12.8.1"\n      cudnn: "9.10.2"\n      nccl: "2.26.2"\n      dcgm: "4.5.2"\n',
        '      cuda: "13.0.2"\n      nccl: "2.28.3"\n').replace('rocm: "7.1.0"', 'rocm: "7.1.1"\n      amdgpu: "30.20.1"')
    compiled = compile_text(text)
    assert not [f for f in compiled.located() if f.severity >= Severity.ERROR], [f.message for f in compiled.located()]
    files = render_ansible(compiled.fleet)
    assert "kmod-nvidia-open-dkms-3:580.167.08-1.el10" in pins(files, "hopper-cu12.dnf").splitlines()
    assert not [p for p in files if p.suffix == ".module"]
    assert "repos/rhel10/x86_64\n" in pins(files, "hopper-cu12.repo")
    # ROCm 7.1.1's rhel10 tree holds EL10 builds (not the el9 tree's .el8 ones), amdgpu-dkms at epoch 1.
    assert pins(files, "cdna3-rocm71.dnf").splitlines() == [
        "amdgpu-dkms-1:6.16.6-2255209.el10", "rocm-core-7.1.1.70101-38.el10", "rocm-7.1.1.70101-38.el10",
        "rccl-2.27.7.70101-38.el10"]
    assert "baseurl=https://repo.radeon.com/rocm/rhel10/7.1.1/main\n" in pins(files, "cdna3-rocm71.repo")


def test_a_rocm_release_without_rhel_10_in_amds_table_is_a_located_error_on_el10() -> None:
    """ROCm 7.0.x's install docs list RHEL 9.6, 9.4 and 8.10 only (rocm-install-on-linux docs/conf.py
    at 7.0.0): no EL10 row, so an AMD stack at 7.0.2 on rocky-10 stops at its rocm line."""
    compiled = compile_text(spec("rocky-10", "580.167.08").replace('rocm: "7.1.0"', 'rocm: "7.0.2"'), "fleet.yaml")
    errors = [f for f in compiled.located() if f.rule == "package-pin" and f.severity >= Severity.ERROR]
    assert any(f.line == 18 and "no published EL10 package literal for rocm 7.0.2" in f.message for f in errors), [
        (f.line, f.message) for f in errors]


def test_a_release_without_an_el_row_is_a_located_error_never_a_made_up_literal() -> None:
    compiled = compile_text(spec("rocky-10", "580.82.07"), "fleet.yaml")
    errors = [f for f in compiled.located() if f.rule == "package-pin" and f.severity >= Severity.ERROR]
    assert errors and errors[0].line == 12, [(f.line, f.message) for f in compiled.located()]
    assert "no published EL10 package literal for driver 580.82.07" in errors[0].message
    assert "el_packages.yaml" in errors[0].message


def test_modelled_literals_are_warned_with_the_el_check() -> None:
    found = [f for f in compile_file(EXAMPLES / "rocky9.yaml").located() if f.rule == "package-pin"]
    assert found and all("dnf list --showduplicates" in f.message for f in found)
    assert any("nvidia-driver-cuda, kmod-nvidia-open-dkms" in f.message for f in found)


# docs/packaging.md's EL table is the data, row for row.
def table_rows() -> list[list[str]]:
    section = (ROOT / "docs/packaging.md").read_text().split("\n## EL nodes ", 1)[1].split("\n#", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")]
    assert lines[0] == "| EL | component | release | packages | source | seen | unconfirmed |"
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[1:]]


def test_the_docs_el_table_is_the_catalog_data() -> None:
    rows = []
    for r in el_data()[0]:
        packages = ", ".join(f"{n.name}-{n.epoch}:{n.version}-{n.release}" + (f" ({n.condition})" if n.condition
                                                                                 else "") for n in r.packages)
        rows.append([str(r.el), r.component, r.release, packages, r.source, r.seen, r.unconfirmed or "-"])
    assert table_rows() == rows


def test_the_docs_site_built_table_is_the_catalog_data() -> None:
    section = (ROOT / "docs/packaging.md").read_text().split("\n### EL site-built packages ", 1)[1].split("\n#", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")]
    assert lines[0] == "| EL | component | packages | release | source | seen | unconfirmed |"
    assert [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[1:]] == [
        [str(r.el), r.component, "; ".join(f"{k}: {', '.join(v)}" for k, v in r.names.items()), r.release, r.source,
         r.seen, r.unconfirmed or "-"] for r in el_site_built()]
    assert {(r.el, r.component) for r in el_site_built()} == {(el, c) for el in (9, 10)
                                                               for c in ("slurm", "enroot", "pyxis")}


def test_every_row_cites_a_source_and_parses() -> None:
    releases, repos = el_data()
    for r in releases:
        assert r.source and r.seen and r.packages and r.repo.startswith("https://"), r
        assert r.el in (9, 10)
    assert {(r.el, r.vendor) for r in repos} == {(el, v) for el in (9, 10) for v in ("nvidia", "amd")}
    with pytest.raises(ValueError):
        parse_nevra("nvidia-driver-cuda")
    n = parse_nevra("amdgpu-dkms-1:6.1.5.50601-1649308.el9")
    assert (n.name, n.epoch, n.version, n.release) == ("amdgpu-dkms", 1, "6.1.5.50601", "1649308.el9")


def test_site_yml_refuses_a_node_whose_package_manager_is_not_the_spec_oss(tmp_path: Path) -> None:
    """Real ansible-playbook: the first play gathers the node's facts and refuses a node whose
    package manager is not the one spec.os names (this Debian machine, pkg_mgr apt, as an EL
    fleet's h100-001); no later play runs, so no task changes the node."""
    compiled = compile_file(EXAMPLES / "rocky9.yaml")
    for rel, text in render_ansible(compiled.fleet).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    exe = shutil.which("ansible-playbook")
    assert exe, "ansible-playbook is required (pip install ansible-core)"
    env = {"ANSIBLE_CONFIG": str(ROOT / "playbooks/ansible.cfg"), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "PATH": "/usr/bin:/bin:" + str(Path(exe).parent)}  # fmt: skip
    proc = subprocess.run([exe, "-i", str(tmp_path / "ansible/inventory.yml"), "--limit", "h100-001",
                           "-e", "ansible_connection=local", "-e", f"ansible_python_interpreter={sys.executable}",
                           str(ROOT / "playbooks/site.yml")], capture_output=True, text=True, env=env, timeout=120)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out
    assert ("h100-001: spec.os is rocky-9, whose packages install with dnf, but the node's package manager is apt"
            in out), out
    assert "Node runtime (pinned stack tuple)" not in out, out


def test_apply_takes_an_el_fleet_to_the_plan_and_its_confirmation(tmp_path: Path) -> None:
    """No EL refusal before the plan any more: with no terminal to confirm on, apply shows the
    plan of the rocky9 fleet and stops there, as for any fleet."""
    from typer.testing import CliRunner

    from fleetspec.cli import app

    result = CliRunner().invoke(app, ["apply", str(EXAMPLES / "rocky9.yaml"), "--state", str(tmp_path / "s")])
    assert result.exit_code == 1, result.output
    assert "refusing to apply without confirmation" in result.output and "spec.os" not in result.output
    assert "6 new node(s)" in result.output  # the plan: every node of the fleet, new


def test_the_cudnn_roles_cuda_major_check_takes_the_el_names(tmp_path: Path) -> None:
    """The cudnn role checks each cuDNN pin belongs to the tuple's CUDA major; the rocky9 stack's
    EL names (libcudnn9-cuda-12, libcudnn9-devel-cuda-12) pass, another major stops."""
    stack = yaml.safe_load(render_ansible(compile_file(EXAMPLES / "rocky9.yaml").fleet)[
        PurePosixPath("ansible/group_vars/stack_hopper_cu12.yml")].split("---\n", 1)[1])
    exe = shutil.which("ansible-playbook")
    assert exe, "ansible-playbook is required (pip install ansible-core)"
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
                    "    - ansible.builtin.include_role: {name: cudnn}\n")
    env = {"ANSIBLE_ROLES_PATH": str(ROOT / "playbooks/roles"), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
           "PATH": "/usr/bin:/bin:" + str(Path(exe).parent)}
    for cuda, ok in (("12.8.1", True), ("13.0.2", False)):
        (tmp_path / "vars.json").write_text(json.dumps({
            "fleetspec_packages": stack["fleetspec_packages"], "fleetspec_stack": {**stack["fleetspec_stack"], "cuda": cuda},
            "ansible_python_interpreter": sys.executable}))
        done = subprocess.run([exe, "-i", "localhost,", str(play), "-e", f"@{tmp_path / 'vars.json'}"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert (done.returncode == 0) is ok, done.stdout[-3000:]
    assert "libcudnn9-cuda-12 does not belong to CUDA 13.0.2" in done.stdout


def test_every_el_repo_of_every_catalogued_release_names_its_signing_key() -> None:
    """Every .repo section fleetspec renders, for every EL release of every vendor row, checks
    signatures with a key URL (dnf refuses a gpgcheck=1 repository without one: "Public key ...
    is not installed"); the keys are the vendors' own .repo files' (the catalog's sources)."""
    sections = {}
    for row in el_data()[0]:
        if row.component == "driver":
            stack = StackTuple("s", "nvidia", driver=row.release)
        elif row.component in ("rocm", "amdgpu"):
            stack = StackTuple("s", "amd", **{row.component: row.release})
        else:
            continue  # CUDA, cuDNN, NCCL, DCGM: NVIDIA's tree, rendered with the driver rows'
        parser = configparser.ConfigParser(interpolation=None)
        parser.read_string(el_repo_file(stack, row.el))
        assert parser.sections(), (row.el, row.component, row.release)
        sections.update({(row.el, rid): dict(parser[rid]) for rid in parser.sections()})
    unsigned = [k for k, s in sections.items() if s.get("gpgcheck") != "1" or not s.get("gpgkey", "").startswith("https://")]
    assert not unsigned, unsigned
    assert sections[(10, "cuda-rhel10-x86_64")]["gpgkey"] == (
        "https://developer.download.nvidia.com/compute/cuda/repos/rhel10/x86_64/CDF6BA43.pub")
    assert sections[(9, "cuda-rhel9-x86_64")]["gpgkey"].endswith("/rhel9/x86_64/D42D0685.pub")
    assert {s["gpgkey"] for (el, rid), s in sections.items() if not rid.startswith("cuda-")} == {
        "https://repo.radeon.com/rocm/rocm.gpg.key"}
    assert {el for el, _ in sections} == {9, 10}


def test_a_repository_row_without_a_key_is_refused_never_rendered_unsigned() -> None:
    with pytest.raises(ValueError, match="names no https:// gpgkey"):
        _signing_key({"el": 10, "id": "cuda-rhel10-x86_64", "gpgkey": None})
