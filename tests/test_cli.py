"""The CLI as users meet it: exit codes, formats, and bad input without tracebacks."""

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app
from tests.conftest import EXAMPLES, ROOT

runner = CliRunner()
QUICKSTART = str(EXAMPLES / "quickstart.yaml")
MUSEUM = str(EXAMPLES / "museum.yaml")


def run(*args):
    return runner.invoke(app, list(args))  # a crash fails the test (tests/conftest.py)


def test_validate_ok_and_json_shape():
    assert run("validate", MUSEUM).exit_code == 0
    result = run("validate", QUICKSTART, "--format", "json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"valid": True, "findings": []}


def test_validate_names_the_spec_as_written(tmp_path):
    # Rich markup would take '[prod]' for a tag and drop it from the line
    spec = tmp_path / "fleet[prod].yaml"
    spec.write_text(open(QUICKSTART).read())
    result = run("validate", str(spec))
    assert (result.exit_code, result.stderr) == (0, f"{spec}: valid (no findings)\n")


def test_validate_error_formats(tmp_path):
    bad = tmp_path / "fleet.yaml"
    bad.write_text(open(QUICKSTART).read().replace("model: h100-sxm", "model: h100-sxn", 1))
    text = run("validate", str(bad))
    assert text.exit_code == 1
    assert f"{bad}:22:" in text.stderr and "[unknown-gpu-model]" in text.stderr and "Did you mean" in text.stderr
    data = json.loads(run("validate", str(bad), "--format", "json").stdout)
    assert data["valid"] is False
    [finding] = data["findings"]
    assert set(finding) >= {"rule", "severity", "message", "path", "line", "column"}
    assert (finding["rule"], finding["severity"], finding["line"]) == ("unknown-gpu-model", "error", 22)
    gh = run("validate", str(bad), "--format", "github")
    assert gh.stdout.startswith(f"::error file={bad},line=22,col=")


def test_warnings_do_not_fail_validation(tmp_path):
    spec = tmp_path / "fleet.yaml"
    spec.write_text(open(QUICKSTART).read().replace('version: "25.11.8"', 'version: "25.11.3"'))
    result = run("validate", str(spec), "--format", "json")
    assert result.exit_code == 0
    assert [f["rule"] for f in json.loads(result.stdout)["findings"]] == ["slurm-security-release"]


def test_partitions_json():
    result = run("partitions", MUSEUM, "--format", "json")
    assert result.exit_code == 0
    parts = {p["name"]: p for p in json.loads(result.stdout)["partitions"]}
    hopper = parts["nvidia-hopper"]
    assert set(hopper) >= {"name", "scheduler", "vendor", "generation", "gpu_models", "nodes", "gpus", "stack", "tuple"}
    assert hopper["nodes"] == sorted(hopper["nodes"]) and len(hopper["nodes"]) == 8 and hopper["gpus"] == 64
    assert hopper["tuple"] == {"driver": "580.95.05", "cuda": "13.0.2", "cudnn": "9.17.0", "nccl": "2.28.3"}
    assert parts["amd-cdna3"]["vendor"] == "amd" and parts["amd-cdna3"]["tuple"]["rccl"] == "2.26.6"


def test_partitions_table_lists_every_partition():
    result = run("partitions", MUSEUM)
    assert result.exit_code == 0
    for name in ("nvidia-hopper", "nvidia-blackwell", "amd-cdna3", "amd-cdna4", "nvidia-ampere", "debug"):
        assert name in result.stdout


def test_render_writes_tree_and_replaces_it_atomically(tmp_path):
    out = tmp_path / "build"
    assert run("render", MUSEUM, "--out", str(out)).exit_code == 0
    assert (out / "fleet.json").exists() and (out / "slurm" / "slurm.conf").exists()
    assert (out / "ansible" / "inventory.yml").exists() and (out / "kubernetes").is_dir()
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # A spec with errors writes nothing and leaves the previous tree as it was.
    bad = tmp_path / "bad.yaml"
    bad.write_text(open(MUSEUM).read().replace("stack: hopper-cu13", "stack: nope", 1))
    result = run("render", str(bad), "--out", str(out))
    assert result.exit_code == 1 and "nothing written" in result.stderr
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    # Rendering quickstart over it replaces the whole tree (no stale kubernetes/).
    assert run("render", QUICKSTART, "--out", str(out)).exit_code == 0
    assert not (out / "kubernetes").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".build")] == []


def test_render_refuses_a_directory_it_did_not_write(tmp_path):
    (tmp_path / "precious.txt").write_text("mine")
    result = run("render", QUICKSTART, "--out", str(tmp_path))
    assert result.exit_code == 1 and "not written by fleetspec" in result.stderr
    assert (tmp_path / "precious.txt").read_text() == "mine"


def test_schema_is_json_schema_for_editors():
    result = run("schema")
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert {"apiVersion", "kind", "metadata", "spec"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False


def test_catalog_lists_required_models():
    data = json.loads(run("catalog", "--format", "json").stdout)
    ids = {g["id"] for g in data["gpus"]} | {a for g in data["gpus"] for a in g["aliases"]}
    for model in ["v100", "a100", "h100", "h100-sxm", "h200", "gh200", "b200", "gb200", "b300", "gb300", "l40", "l40s", "mi250x", "mi300x", "mi325x", "mi350x", "mi355x"]:
        assert model in ids
    assert all(g["sources"] for g in data["gpus"])


BAD_INPUTS = {
    "malformed": "apiVersion: fleetspec.io/v1alpha1\nkind: [Fleet\n",
    "wrong-type": "apiVersion: fleetspec.io/v1alpha1\nkind: Fleet\nmetadata: {name: x}\nspec: 3\n",
    "unknown-key": "apiVersion: fleetspec.io/v1alpha1\nkind: Fleet\nmetadata: {name: x, labels: {}}\nspec: {}\n",
    "duplicate-key": "apiVersion: fleetspec.io/v1alpha1\nkind: Fleet\nkind: Fleet\n",
    "alias-bomb": "a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ",".join([f"*{chr(97 + i)}"] * 10) + "]\n" for i in range(8)),
    "empty": "",
    "shell-hostname": open(QUICKSTART).read().replace("h100-[001-004]", "h100-001;reboot", 1),
    "not-a-mapping": "- just\n- a list\n",
    "python-tag": "x: !!python/object/apply:os.system [reboot]\n",
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_one_clear_error_no_traceback(tmp_path, name):
    spec = tmp_path / f"{name}.yaml"
    spec.write_text(BAD_INPUTS[name])
    result = run("validate", str(spec), "--format", "json")
    assert result.exit_code == 1
    assert result.exception is None or isinstance(result.exception, SystemExit)
    findings = json.loads(result.stdout)["findings"]
    assert findings and all(f["line"] >= 1 and f["column"] >= 1 and f["file"] == str(spec) for f in findings)
    assert all(". " in f["message"] or "?" in f["message"] for f in findings)  # says what to do


def test_a_50_mb_file_and_a_directory(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)
    for target in (big, tmp_path):
        result = run("validate", str(target))
        assert result.exit_code == 1 and "Traceback" not in result.stderr


def test_console_script_starts_without_heavy_imports():
    code = (
        "import sys; from fleetspec.cli import app; "
        "heavy = [m for m in ('pulumi', 'ansible_runner', 'ansible') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.stdout.strip() == "[]"


def test_apply_says_where_the_playbooks_are_missing(tmp_path, monkeypatch):
    spec = tmp_path / "fleet.yaml"
    spec.write_text((EXAMPLES / "quickstart.yaml").read_text())
    assert run("secrets", "init", str(spec)).exit_code == 0
    monkeypatch.setenv("FLEETSPEC_PLAYBOOKS", str(tmp_path / "nowhere"))
    result = run("apply", str(spec), "--yes", "--state", str(tmp_path / "state"))
    assert result.exit_code == 1
    assert "FLEETSPEC_PLAYBOOKS" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "state" / "quickstart.state.json").exists()  # nothing recorded


def test_locations_and_paths_print_as_written_never_as_emoji(tmp_path):
    """`fleet.yaml:100:24` once printed as `fleet.yaml💯24`, and `:fire:` as a flame."""
    folder = tmp_path / ":fire:"
    folder.mkdir()
    bad = folder / "fleet.yaml"
    lines = open(QUICKSTART).read().replace("model: h100-sxm", "model: h100-sxn", 1)
    bad.write_text("# padding\n" * 78 + lines)  # the bad model moves from line 22 to line 100
    for env in ({}, {"COLUMNS": "300"}):
        result = subprocess.run([sys.executable, "-m", "fleetspec.cli", "validate", str(bad)], capture_output=True,
                                text=True, env={**os.environ, **env})
        assert result.returncode == 1
        assert f"{bad}:100:24: error [unknown-gpu-model]" in result.stderr
        assert "\U0001f4af" not in result.stderr and "\U0001f525" not in result.stderr


def test_output_honours_columns_when_piped():
    # run beside the spec: the heading names the spec's path as given, never wrapped, and a
    # checkout's absolute path would make its length depend on where the clone lives
    command = [sys.executable, "-m", "fleetspec.cli", "partitions", "quickstart.yaml"]
    narrow = subprocess.run(command, capture_output=True, text=True, cwd=EXAMPLES,
                            env={**os.environ, "COLUMNS": "60", "PYTHONPATH": str(ROOT)})
    wide = subprocess.run(command, capture_output=True, text=True, cwd=EXAMPLES,
                          env={**{k: v for k, v in os.environ.items() if k != "COLUMNS"}, "PYTHONPATH": str(ROOT)})
    assert narrow.returncode == 0 and wide.returncode == 0
    assert max(map(len, narrow.stdout.splitlines())) <= 60
    assert max(map(len, wide.stdout.splitlines())) > 60  # a pipe without COLUMNS is wide, not 80


def test_apply_without_yes_off_a_terminal_shows_the_plan_and_leaves_nothing(tmp_path):
    spec = tmp_path / "fleet.yaml"
    spec.write_text((EXAMPLES / "quickstart.yaml").read_text())
    result = run("apply", str(spec))  # CliRunner's stdin is not a terminal
    assert result.exit_code == 1
    assert "Plan for fleet quickstart" in result.stdout and "Pass --yes" in result.stderr
    assert not (tmp_path / ".fleetspec").exists()  # no state directory, no .lock.guard


def test_limited_apply_says_what_it_skips_before_asking(tmp_path):
    spec = tmp_path / "fleet.yaml"
    spec.write_text((EXAMPLES / "quickstart.yaml").read_text())
    result = run("apply", str(spec), "--limit", "h100-[001-002],ctl-01")
    assert result.exit_code == 1  # no --yes, no terminal
    text = " ".join(result.stdout.split())
    assert "Restricted to --limit h100-[001-002],ctl-01: 6 node(s) with changes are skipped: h100-[003-008]" in text


def test_lab_up_with_an_invalid_spec_lists_located_findings(tmp_path):
    bad = tmp_path / "fleet.yaml"
    bad.write_text(open(QUICKSTART).read().replace("model: h100-sxm", "model: h100-sxn").replace(
        "stack: hopper-cu13", "stack: hoper-cu13", 1))
    result = run("lab", "up", str(bad), "--dir", str(tmp_path / "lab"))
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert any(line.strip().startswith(f"{bad}:22:") and "[unknown-gpu-model]" in line for line in lines)
    assert any(line.strip().startswith(f"{bad}:23:") and "[unknown-stack]" in line for line in lines)
    assert ";" not in result.stderr.split("\n", 1)[0] and not (tmp_path / "lab").exists()


@pytest.mark.parametrize("command", [["validate"], ["apply"], ["plan"], ["verify"], ["lab", "up"], ["secrets", "init"]])
def test_help_shows_real_metavars(command):
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    usage = result.output.splitlines()[0]
    assert usage.endswith("[OPTIONS] SPEC") or usage.endswith("[OPTIONS] SPEC|PLAN"), usage
    assert "{" not in result.output and "<bool>" not in result.output


def test_a_github_annotation_escapes_the_file_name(tmp_path):
    """A ',' or ':' in a spec's path would end the file= property and start another
    (line=1 from the name itself); escaped as @actions/core escapeProperty does."""
    bad = tmp_path / "a,line=1,col=1:b%.yaml"
    bad.write_text(open(QUICKSTART).read().replace("model: h100-sxm", "model: h100-sxn", 1))
    gh = run("validate", str(bad), "--format", "github")
    head = gh.stdout.split("::")[1]
    assert head.startswith("error file=") and head.count(",") == 3, head  # file, line, col, title
    assert "a%2Cline=1%2Ccol=1%3Ab%25.yaml,line=22," in head
