"""The collector run for real: on this machine, on a built node tree, under old Pythons."""

from __future__ import annotations

import ast
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fleetspec.node_side.collector as collector_module
from tests.conftest import require_shared

COLLECTOR = Path(collector_module.__file__).resolve()
FIXTURE = "fixtures/h200-node"


def run_collector(*args: str, python: str = sys.executable, env: dict | None = None) -> dict:
    """Run collector.py as a node would, check the exit contract, return its JSON."""
    proc = subprocess.run(
        [python, str(COLLECTOR), *args], capture_output=True, text=True, timeout=240, env=env
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def misc_section(title: str) -> str:
    text = (require_shared(FIXTURE) / "misc.txt").read_text()
    for section in re.split(r"^## ", text, flags=re.MULTILINE):
        head, _, body = section.partition("\n")
        if head.strip() == title:
            return body
    raise AssertionError(f"misc.txt has no section {title!r}")


# --- this machine, as it is -------------------------------------------------


@pytest.fixture(scope="module")
def local_facts() -> dict:
    return run_collector()


def test_local_run_prints_one_document_with_kernel_and_os(local_facts: dict) -> None:
    assert local_facts["schema"] == "fleetspec.io/facts/v1"
    assert local_facts["kernel"] == os.uname().release
    os_release = Path("/etc/os-release").read_text()
    expected_id = re.search(r"^ID=\"?([^\"\n]+)", os_release, re.MULTILINE).group(1)
    assert local_facts["os"]["id"] == expected_id
    assert local_facts["hostname"] == os.uname().nodename
    assert "collected_at" not in local_facts
    for section in ("nvidia", "cuda", "cudnn", "nccl", "amd", "packages", "slurm", "fabric"):
        assert isinstance(local_facts[section]["errors"], list), section


def test_local_run_reports_absent_gpus(local_facts: dict) -> None:
    if Path("/proc/driver/nvidia/version").exists() or Path("/sys/module/amdgpu").exists():
        pytest.skip("this machine has a GPU driver loaded")
    nvidia, amd = local_facts["nvidia"], local_facts["amd"]
    assert nvidia["present"] is False
    assert nvidia["driver_version"] == "absent" and nvidia["kernel_module"] == "absent"
    assert nvidia["gpus"] == []
    assert amd["present"] is False
    assert amd["driver_version"] == "absent" and amd["gpus"] == []
    assert local_facts["fabric"]["infiniband"] == [] or Path("/sys/class/infiniband").exists()


def test_local_run_is_deterministic(local_facts: dict) -> None:
    assert run_collector() == local_facts
    timed = run_collector("--with-time")
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00$", timed.pop("collected_at"))


def test_local_run_matches_dpkg_and_slurmd(local_facts: dict) -> None:
    if shutil.which("dpkg-query") is None:
        pytest.skip("not a dpkg system")
    assert local_facts["packages"]["manager"] == "dpkg"
    listed = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n", "slurm*"],
        capture_output=True, text=True,
    ).stdout
    expected = {line.split("\t")[0]: line.split("\t")[1] for line in listed.splitlines() if "\tii" in line}
    reported = {p["name"]: p["version"] for p in local_facts["packages"]["installed"] if p["name"].startswith("slurm")}
    assert reported == expected
    slurmd = shutil.which("slurmd", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if slurmd:
        version = subprocess.run([slurmd, "-V"], capture_output=True, text=True).stdout.split()[-1]
        assert local_facts["slurm"]["slurmd_version"] == version
    else:
        assert local_facts["slurm"]["slurmd_version"] == "absent"


def test_local_cudart_libraries_report_their_runtime_version(local_facts: dict) -> None:
    patterns = ["/usr/local/cuda*/lib*/libcudart.so*", "/usr/lib/x86_64-linux-gnu/libcudart.so*"]
    files = {os.path.realpath(p) for pattern in patterns for p in glob.glob(pattern)}
    if not files:
        pytest.skip("no libcudart on this machine")
    reported = {lib["path"]: lib["version"] for lib in local_facts["cuda"]["cudart"]}
    for path in files:
        assert re.match(r"^\d+\.\d+$", reported[path]), (path, reported)


def test_recorded_nvidia_smi_outputs_flow_into_the_gpu_list(tmp_path: Path) -> None:
    """nvidia-smi replaying the H200 node's recorded answers: XML and CSV merge per GPU."""
    shared = require_shared(FIXTURE)
    csv_lines = (shared / "query-gpu.csv").read_text().splitlines()[1:]
    noheader = "\n".join(line.replace(" MiB", "") for line in csv_lines)
    tool = tmp_path / "nvidia-smi"
    tool.write_text(
        "#!/bin/sh\n"
        f"case \"$*\" in *--query-gpu*) printf '%s\\n' '{noheader}';; "
        f"'-q -x') cat '{shared / 'nvidia-smi-q.xml'}';; *) exit 9;; esac\n"
    )
    tool.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ.get('PATH', '')}")
    nvidia = run_collector(env=env)["nvidia"]
    assert nvidia["present"] is True
    assert nvidia["smi_driver_version"] == "580.159.04"
    assert nvidia["smi_cuda_version"] == "13.0"
    assert nvidia["errors"] == []
    (gpu,) = nvidia["gpus"]
    assert (gpu["name"], gpu["compute_capability"], gpu["memory_mib"]) == ("NVIDIA H200", "9.0", 143771)
    assert gpu["uuid"] == "GPU-00000000-1111-2222-3333-444444444444"
    assert gpu["mig_mode"]["current"] == "Disabled"


def test_a_failing_nvidia_smi_is_an_error_not_a_crash(tmp_path: Path) -> None:
    tool = tmp_path / "nvidia-smi"
    message = "NVIDIA-SMI has failed because it could not communicate with the driver"
    tool.write_text(f"#!/bin/sh\necho '{message}'\nexit 9\n")
    tool.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ.get('PATH', '')}")
    nvidia = run_collector(env=env)["nvidia"]
    assert nvidia["smi_driver_version"] == "unknown"
    assert any("NVIDIA-SMI has failed" in error for error in nvidia["errors"])


# --- a node tree under --root -------------------------------------------------


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def link(root: Path, relative: str, target: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


@pytest.fixture
def node_tree(tmp_path: Path) -> Path:
    """The H200 node's files as a tree; absolute symlinks like the real node's."""
    root = tmp_path / "node"
    write(root, "proc/driver/nvidia/version", misc_section("proc version"))
    write(root, "proc/sys/kernel/osrelease", "6.18.44-fc-v657-gpu\n")
    write(root, "etc/os-release", misc_section("uname").split("\n", 1)[1])
    write(root, "etc/hostname", "h200-001\n")
    version_json = {
        "cuda": {"name": "CUDA SDK", "version": "13.0.2"},
        "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": "13.0.96"},
    }
    write(root, "usr/local/cuda-13.0/version.json", json.dumps(version_json, indent=3))
    link(root, "usr/local/cuda", "/usr/local/cuda-13.0")
    header = "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 19\n#define CUDNN_PATCHLEVEL 0\n"
    write(root, "usr/include/cudnn_version.h", header)
    write(root, "opt/rocm-6.3.3/.info/version", "6.3.3-74\n")
    link(root, "opt/rocm", "/opt/rocm-6.3.3")
    write(root, "sys/module/amdgpu/version", "6.10.5\n")
    port = "sys/class/infiniband/mlx5_0/ports/1/"
    write(root, port + "state", "4: ACTIVE\n")
    write(root, port + "rate", "400 Gb/sec (4X NDR)\n")
    write(root, port + "link_layer", "InfiniBand\n")
    return root


def test_node_tree_without_commands(node_tree: Path) -> None:
    facts = run_collector("--root", str(node_tree), "--no-commands")
    assert facts["hostname"] == "h200-001"
    assert facts["kernel"] == "6.18.44-fc-v657-gpu"
    assert (facts["os"]["id"], facts["os"]["version_id"]) == ("ubuntu", "24.04")
    assert facts["probe"] == {"root": str(node_tree), "commands": False, "load_libraries": True,
                              "python": "%d.%d.%d" % sys.version_info[:3]}
    nvidia = facts["nvidia"]
    assert (nvidia["driver_version"], nvidia["kernel_module"]) == ("580.159.04", "open")
    assert nvidia["present"] is True
    assert nvidia["smi_driver_version"] == "not-collected" and nvidia["gpus"] == []
    cuda = facts["cuda"]
    assert cuda["toolkits"] == [{"path": "/usr/local/cuda-13.0", "version": "13.0.2",
                                 "components": {"cuda_cudart": "13.0.96"}}]
    assert cuda["default_toolkit"] == "/usr/local/cuda-13.0"
    assert cuda["nvcc"] == {"release": "not-collected", "version": "not-collected"}
    assert facts["cudnn"]["headers"] == [{"path": "/usr/include/cudnn_version.h", "version": "9.19.0"}]
    amd = facts["amd"]
    assert (amd["rocm_version"], amd["rocm_path"], amd["driver_version"]) == ("6.3.3", "/opt/rocm-6.3.3", "6.10.5")
    assert amd["rocm_installs"] == [{"path": "/opt/rocm-6.3.3", "version": "6.3.3"}]
    assert amd["gpu_source"] == "not-collected"
    (device,) = facts["fabric"]["infiniband"]
    assert device["device"] == "mlx5_0"
    assert device["ports"][0]["state"] == "ACTIVE"
    assert device["ports"][0]["rate_gbps"] == 400
    assert device["ports"][0]["link_layer"] == "InfiniBand"
    assert facts["packages"]["manager"] == "not-collected"
    assert facts["slurm"]["slurmd_version"] == "not-collected"


def test_an_empty_root_is_all_absent(tmp_path: Path) -> None:
    facts = run_collector("--root", str(tmp_path), "--no-commands")
    assert facts["kernel"] == "absent" and facts["hostname"] == "absent"
    assert facts["os"] == {"id": "absent", "version_id": "absent", "pretty_name": "absent"}
    assert facts["nvidia"]["driver_version"] == "absent" and facts["nvidia"]["present"] is False
    assert facts["cuda"]["toolkits"] == [] and facts["cuda"]["default_toolkit"] == "absent"
    assert facts["nccl"]["libraries"] == [] and facts["amd"]["rocm_version"] == "absent"


# --- libraries that answer version calls ---------------------------------------

# Stand-ins for the vendor libraries: real shared objects exporting the real
# symbols with the H200 node's answers, so discovery, loading and decoding all run.
LIBRARIES = {
    "usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3": "int ncclGetVersion(int *v) { *v = 22803; return 0; }",
    "opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2":
        "int ncclGetVersion(int *v) { *v = 22809; return 0; }",
    "usr/local/cuda-13.0/lib64/libcudart.so.13.0.96": "int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }",
    "usr/lib/x86_64-linux-gnu/libcudnn.so.9.19.0": "unsigned long cudnnGetVersion(void) { return 91900; }",
    "opt/rocm-6.3.3/lib/librccl.so.1.0.60303": "int ncclGetVersion(int *v) { *v = 22105; return 0; }",
}


@pytest.fixture
def node_with_libraries(node_tree: Path) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        if os.environ.get("CI"):
            pytest.fail("a C compiler (gcc) is needed under CI")
        pytest.skip("no C compiler to build stand-in libraries")
    for relative, source in LIBRARIES.items():
        target = node_tree / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        src = target.parent / (target.name + ".c")
        src.write_text(source + "\n")
        subprocess.run([compiler, "-shared", "-fPIC", "-o", str(target), str(src)], check=True)
        src.unlink()
    lib = "usr/lib/x86_64-linux-gnu/"
    link(node_tree, lib + "libnccl.so.2", "libnccl.so.2.28.3")
    link(node_tree, lib + "libcudnn.so.9", "libcudnn.so.9.19.0")
    link(node_tree, "usr/local/cuda-13.0/lib64/libcudart.so.13", "libcudart.so.13.0.96")
    link(node_tree, "lib", "usr/lib")
    site = "opt/torch/.venv/lib/python3.12/site-packages/"
    write(node_tree, site + "nvidia_nccl_cu13-2.28.9.dist-info/RECORD",
          "nvidia/nccl/lib/libnccl.so.2,sha256=abc,123\nnvidia_nccl_cu13-2.28.9.dist-info/RECORD,,\n")
    return node_tree


def test_every_nccl_on_the_node_with_its_own_version(node_with_libraries: Path) -> None:
    facts = run_collector("--root", str(node_with_libraries), "--no-commands")
    nccl = facts["nccl"]
    assert nccl["versions"] == ["2.28.3", "2.28.9"]
    assert nccl["errors"] == []
    system, venv = sorted(nccl["libraries"], key=lambda lib: lib["origin"] == "python")
    assert system == {
        "path": "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3",
        "aliases": [
            "/lib/x86_64-linux-gnu/libnccl.so.2",
            "/lib/x86_64-linux-gnu/libnccl.so.2.28.3",
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3",
        ],
        "origin": "system",
        "environment": None,
        "version": "2.28.3",
        "file_version": "2.28.3",
        "package": "not-collected",
    }
    assert venv["path"] == "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
    assert venv["environment"] == "/opt/torch/.venv"
    assert (venv["origin"], venv["version"], venv["file_version"]) == ("python", "2.28.9", None)
    assert venv["package"] == {"manager": "pip", "name": "nvidia-nccl-cu13", "version": "2.28.9"}


def test_cudart_cudnn_and_rccl_report_their_versions(node_with_libraries: Path) -> None:
    facts = run_collector("--root", str(node_with_libraries), "--no-commands")
    (cudart,) = facts["cuda"]["cudart"]
    assert (cudart["path"], cudart["version"], cudart["file_version"]) == (
        "/usr/local/cuda-13.0/lib64/libcudart.so.13.0.96", "13.0", "13.0.96")
    assert facts["cudnn"]["versions"] == ["9.19.0"]
    (rccl,) = facts["amd"]["rccl"]
    # The file name carries the ABI and the ROCm build, not the RCCL version.
    assert (rccl["version"], rccl["file_version"]) == ("2.21.5", "1.0.60303")


def test_no_load_leaves_library_versions_uncollected(node_with_libraries: Path) -> None:
    facts = run_collector("--root", str(node_with_libraries), "--no-commands", "--no-load")
    assert {lib["version"] for lib in facts["nccl"]["libraries"]} == {"not-collected"}
    assert facts["nccl"]["versions"] == []


def test_a_library_that_cannot_load_is_unknown_with_an_error(node_tree: Path) -> None:
    write(node_tree, "usr/lib/x86_64-linux-gnu/libnccl.so.2", "not an ELF file")
    nccl = run_collector("--root", str(node_tree), "--no-commands")["nccl"]
    (lib,) = nccl["libraries"]
    assert lib["version"] == "unknown"
    assert len(nccl["errors"]) == 1 and "libnccl.so.2" in nccl["errors"][0]


# --- Python 3.8 and the stdlib-only rule ----------------------------------------


def test_collector_parses_as_python_3_8() -> None:
    ast.parse(COLLECTOR.read_text(), feature_version=(3, 8))


def test_collector_imports_only_the_standard_library() -> None:
    tree = ast.parse(COLLECTOR.read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            modules.add((node.module or "").split(".")[0])
    assert modules and modules <= set(sys.stdlib_module_names), modules - set(sys.stdlib_module_names)


def oldest_python() -> str | None:
    """The oldest interpreter >= 3.8 on this machine (PATH, then pyenv's versions)."""
    candidates = [shutil.which(f"python3.{minor}") for minor in range(8, 12)]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += sorted(glob.glob(str(pyenv / "3.*" / "bin" / "python3")))
    found = []
    for candidate in filter(None, candidates):
        proc = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[1])"],
                              capture_output=True, text=True)
        if proc.returncode == 0 and proc.stdout.strip().isdigit() and int(proc.stdout) >= 8:
            found.append((int(proc.stdout), candidate))
    return min(found)[1] if found else None


def test_collector_runs_under_the_oldest_python(node_with_libraries: Path) -> None:
    python = oldest_python()
    if python is None:
        pytest.skip("no Python 3.8-3.11 interpreter besides the test's own")
    facts = run_collector("--root", str(node_with_libraries), "--no-commands", python=python)
    assert facts["probe"]["python"].startswith("3.")
    assert facts["nvidia"]["driver_version"] == "580.159.04"
    assert facts["nccl"]["versions"] == ["2.28.3", "2.28.9"]
    local = run_collector(python=python)
    assert local["kernel"] == os.uname().release


def test_nvidia_smi_placeholders_are_no_value() -> None:
    """nvidia-smi writes "N/A", "[N/A]" or "Unknown Error" where it has no value (a query
    that failed, as on a GPU falling off the bus): the collector reports none, never the
    placeholder as if it were the GPU's setting. The health classifier reads the same XML
    through the same helper."""
    xml = (require_shared(FIXTURE) / "nvidia-smi-q.xml").read_text()
    xml = re.sub(r"<persistence_mode>[^<]*<", "<persistence_mode>Unknown Error<", xml, count=1)
    xml = re.sub(r"<vbios_version>[^<]*<", "<vbios_version>[N/A]<", xml, count=1)
    (gpu,) = collector_module.parse_nvidia_smi_xml(xml)["gpus"]
    assert gpu["persistence_mode"] is None
    assert gpu["vbios_version"] is None
    assert gpu["name"] == "NVIDIA H200"


class _NoKmod(collector_module.Host):
    """A node without kmod: ``modinfo`` is not installed (the lent H200 VM has none:
    `modinfo: command not found`), every other tool as on this machine."""

    def which(self, name: str) -> str | None:
        return None if name == "modinfo" else super().which(name)


@pytest.mark.parametrize(("module", "want"), [
    ("lib/modules/6.8.0-90-generic/updates/dkms/nvidia.ko.zst", "unknown"),  # there, version unread
    ("lib/modules/6.8.0-90-generic/kernel/nvidia-580-open/nvidia.ko", "unknown"),
    ("lib/modules/6.8.0-90-generic/kernel/drivers/net/e1000.ko", "absent"),  # a module tree, no nvidia
    (None, "absent"),  # no module tree for the running kernel at all (the lent H200 VM)
])
def test_without_modinfo_the_module_tree_says_whether_a_module_is_on_disk(tmp_path: Path, module: str | None,
                                                                          want: str) -> None:
    """Without modinfo the collector wrote 'absent' whatever was on disk, and verify then warned
    that a reboot would come up without the driver on a node whose DKMS module is in place."""
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text("6.8.0-90-generic\n")
    if module is not None:
        (tmp_path / module).parent.mkdir(parents=True)
        (tmp_path / module).write_bytes(b"")
    errors: list[str] = []
    assert collector_module.collect_installed_module(_NoKmod(str(tmp_path)), errors) == want
    assert errors == []


def test_the_collector_reports_every_package_verify_reads() -> None:
    """verify compares what the collector's dpkg query returns: a package name it reads
    (a stack's pins, CUDA's held components, DCGM, the RDMA user space) that no pattern
    matches would always read as absent on a real node (the rdma-userspace check did,
    before its names were added: the README loop's canary stopped on it)."""
    import fnmatch

    from fleetspec.node_side.collector import PACKAGE_PATTERNS
    from fleetspec.packages import CUDA_COMPONENTS, dcgm_packages, packages_for, rdma_packages
    from fleetspec.pipeline import compile_file
    from tests.conftest import EXAMPLES

    names: set[str] = set()
    for example in ("museum.yaml", "quickstart.yaml"):
        fleet = compile_file(EXAMPLES / example).fleet
        for stack in fleet.stacks:
            names |= {p.name for p in packages_for(stack, fleet.os, [n.gpu for n in fleet.nodes
                                                                     if n.stack == stack.name])}
    names |= set(rdma_packages("infiniband")) | set(rdma_packages("roce"))
    names |= {name for name, _ in dcgm_packages("4.5.2", "580.95.05", "13.0.2")}
    names |= {name for components in CUDA_COMPONENTS.values() for name in components}
    unreported = sorted(n for n in names if not any(fnmatch.fnmatchcase(n, p) for p in PACKAGE_PATTERNS))
    assert unreported == [], f"verify reads packages the collector never reports: {unreported}"
