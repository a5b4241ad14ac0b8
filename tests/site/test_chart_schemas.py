"""--charts DIR: each release's merged values checked against its chart's own
values.schema.json the way Helm checks them (fleetspec/charts/values_schema.py), with real
chart archives built here (tests/site/helm_charts.py) and Helm itself (Helm 4's Go code,
through the helm-python-sdk binding) as the referee."""

from __future__ import annotations

import json
from pathlib import PurePosixPath

import pytest
import yaml
from helm_python.chart import Chart as HelmChart
from helm_python.errors import HelmValuesError
from typer.testing import CliRunner

from fleetspec.charts.files import read_chart, read_charts
from fleetspec.charts.values_schema import violations
from fleetspec.cli import app
from fleetspec.findings import Severity
from fleetspec.pipeline import compile_loaded
from fleetspec.render.kubernetes import kubernetes_resources, render_kubernetes
from fleetspec.spec.loader import load_text
from tests.kubernetes.test_pulumi_program import run_program  # noqa: F401 - the mock-runtime fixture
from tests.site.helm_charts import GPU_OPERATOR_CHART, NFD_SCHEMA, chart_archive, charts_dir
from tests.site.test_helm_values import MUSEUM, _museum

GOOD = """\
    values:
      gpu-operator:
        node-feature-discovery:
          master: {replicaCount: 2, nodeSelector: {node-role.kubernetes.io/control-plane: ""}}
          gc: {interval: 30m}
          image: {pullPolicy: Always}
"""
WRONG_TYPE = """\
    values:
      gpu-operator:
        mig: {strategy: mixed}
        node-feature-discovery:
          master:
            replicaCount: "two"
"""


def _check(text: str, charts):
    return compile_loaded(load_text(text, "museum.yaml"), charts=charts)


def _site(result, severity=None):
    return [f for f in result.located() if f.rule == "site-settings" and (severity is None or f.severity == severity)]


def test_a_good_overlay_passes_the_subchart_schema(tmp_path) -> None:
    result = _check(_museum(GOOD), charts_dir(tmp_path))
    assert result.valid, [f.message for f in _site(result, Severity.ERROR)]
    (note,) = _site(result, Severity.INFO)
    assert "Checked against the values.schema.json of gpu-operator (node-feature-discovery 0.19.0)" in note.message
    # fleetspec's own NFD worker tolerations were checked too (they pass the schema).
    gpu = next(r for r in kubernetes_resources(result.fleet).releases if r.name == "gpu-operator")
    assert gpu.values["node-feature-discovery"]["worker"]["tolerations"]
    assert gpu.values["node-feature-discovery"]["master"]["replicaCount"] == 2


def test_a_wrong_type_in_a_subchart_section_is_one_located_error(tmp_path) -> None:
    text = _museum(WRONG_TYPE)
    assert _check(text, None).valid  # without the chart: nothing knows the type
    result = _check(text, charts_dir(tmp_path))
    errors = _site(result, Severity.ERROR)
    assert len(errors) == 1, [e.message for e in errors]
    (error,) = errors
    assert error.line == text.splitlines().index('            replicaCount: "two"') + 1
    assert error.path == "spec.kubernetes.values.gpu-operator.node-feature-discovery.master.replicaCount"
    assert "'two' is not of type 'integer'" in error.message
    assert "node-feature-discovery 0.19.0's values.schema.json (a subchart of gpu-operator v26.7.0)" in error.message
    assert not result.valid


def test_helm_itself_refuses_and_accepts_the_same_values(tmp_path) -> None:
    """The referee: Helm's own chart loader, dependency processing, coalescing and schema
    validation (helm template's path: render) on the same archive and the same values."""
    archive = charts_dir(tmp_path) / "gpu-operator-v26.7.0.tgz"
    ours = read_chart(archive)

    def helm():  # a fresh load each time: Helm drops disabled subcharts from the loaded chart
        return HelmChart.load(archive)

    for overlay, refused in ((GOOD, False), (WRONG_TYPE, True)):
        fleet = _check(_museum(overlay), None).fleet
        values = next(r for r in kubernetes_resources(fleet).releases if r.name == "gpu-operator").values
        found = violations(ours, values)
        assert [v.path for v in found] == ([("node-feature-discovery", "master", "replicaCount")] if refused else [])
        if refused:
            with pytest.raises(HelmValuesError, match="(?s)node-feature-discovery:.*/master/replicaCount"):
                helm().render(dict(values), name="gpu-operator", namespace="gpu-operator")
        else:
            helm().render(dict(values), name="gpu-operator", namespace="gpu-operator")
    # Helm drops a subchart its condition switches off, and its schema with it.
    off = {"nfd": {"enabled": False}, "node-feature-discovery": {"master": {"replicaCount": "two"}}}
    helm().render(off, name="gpu-operator", namespace="gpu-operator")
    assert violations(ours, off) == []
    on = {**off, "nfd": {"enabled": True}}
    with pytest.raises(HelmValuesError):
        helm().render(on, name="gpu-operator", namespace="gpu-operator")
    assert len(violations(ours, on)) == 1


def test_subchart_defaults_and_parent_globals_are_checked_like_helm(tmp_path) -> None:
    """Helm coalesces the subchart's own defaults into its section and copies the parent's
    global values into it before the subchart's schema sees them."""
    archive = charts_dir(tmp_path) / "gpu-operator-v26.7.0.tgz"
    helm, ours = HelmChart.load(archive), read_chart(archive)
    bad_global = {"global": {"imagePullSecrets": "regcred"}}
    with pytest.raises(HelmValuesError, match="(?s)node-feature-discovery:.*/global/imagePullSecrets"):
        helm.render(bad_global, name="g", namespace="g")
    assert [v.path for v in violations(ours, bad_global)] == [("node-feature-discovery", "global", "imagePullSecrets")]
    # The subchart's default pullPolicy is checked too: a schema that refuses it refuses the install.
    strict = json.loads(json.dumps(NFD_SCHEMA))
    strict["properties"]["image"]["properties"]["pullPolicy"]["enum"] = ["Always"]
    (tmp_path / "strict").mkdir()
    strict_archive = charts_dir(tmp_path / "strict", strict) / "gpu-operator-v26.7.0.tgz"
    with pytest.raises(HelmValuesError, match="pullPolicy"):
        HelmChart.load(strict_archive).render({}, name="g", namespace="g")
    assert [v.path for v in violations(read_chart(strict_archive), {})] == [
        ("node-feature-discovery", "image", "pullPolicy")]


def test_a_release_without_its_chart_is_a_note_not_an_error(tmp_path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _check(_museum(WRONG_TYPE), empty)
    assert result.valid
    (note,) = _site(result, Severity.INFO)
    assert ("gpu-operator (gpu-operator v26.7.0: helm pull gpu-operator --repo https://helm.ngc.nvidia.com/nvidia "
            "--version v26.7.0 -d DIR)") in note.message
    assert note.path == "spec.kubernetes"
    (empty / "gpu-operator-v26.3.3.tgz").write_bytes(chart_archive({**GPU_OPERATOR_CHART, "version": "v26.3.3"}, {}))
    (note,) = _site(_check(_museum(WRONG_TYPE), empty), Severity.INFO)
    assert f"-d DIR; {empty} has gpu-operator v26.3.3, another version)" in note.message
    assert note.source_line.strip() == "kubernetes:"


def test_a_chart_without_a_schema_has_nothing_to_check(tmp_path) -> None:
    folder = tmp_path / "charts"
    folder.mkdir()
    kueue = {"apiVersion": "v2", "name": "kueue", "version": "0.19.2"}
    (folder / "kueue-0.19.2.tgz").write_bytes(chart_archive(kueue, {"values.yaml": "enableCertManager: false\n"}))
    (folder / "broken.tgz").write_bytes(b"not an archive")
    result = _check(MUSEUM, folder)
    assert result.valid
    (note,) = _site(result, Severity.INFO)
    assert "No values.schema.json (nothing to check): kueue (kueue 0.19.2)" in note.message
    (warning,) = _site(result, Severity.WARNING)
    assert "broken.tgz: not a chart archive" in warning.message


def test_the_helm_tree_and_the_pulumi_program_carry_the_checked_values(tmp_path, run_program) -> None:
    """What the check validates is what both outputs hold: the same violation comes out
    of the rendered values file and of the Pulumi program's inputs."""
    chart = read_chart(charts_dir(tmp_path) / "gpu-operator-v26.7.0.tgz")
    fleet = _check(_museum(WRONG_TYPE), None).fleet
    checked = next(r for r in kubernetes_resources(fleet).releases if r.name == "gpu-operator").values
    tree = yaml.safe_load(render_kubernetes(fleet)[PurePosixPath("kubernetes/helm/gpu-operator.values.yaml")])
    ir = tmp_path / "fleet.json"
    ir.write_text(fleet.to_json())
    pulumi = run_program(None, {"fleetspec:irPath": str(ir), "fleetspec:context": "museum-admin"})
    declared = pulumi["release/gpu-operator"].inputs["values"]
    assert tree == checked == declared
    expected = [("node-feature-discovery", "master", "replicaCount")]
    assert [v.path for v in violations(chart, tree)] == [v.path for v in violations(chart, declared)] == expected


def test_blame_for_unknown_and_missing_keys_and_rendered_values(tmp_path) -> None:
    """additionalProperties: the unexpected key's own line, with a did-you-mean; a value
    fleetspec rendered that the schema refuses is reported as fleetspec's bug."""
    schema = json.loads(json.dumps(NFD_SCHEMA))
    schema["properties"]["master"]["additionalProperties"] = False
    # fleetspec renders worker tolerations as a list of objects; this schema wants strings.
    schema["properties"]["worker"]["properties"]["tolerations"] = {"type": "array", "items": {"type": "string"}}
    text = _museum("""\
    values:
      gpu-operator:
        node-feature-discovery:
          master: {replicaCont: 2}
""")
    result = _check(text, charts_dir(tmp_path, schema))
    errors = _site(result, Severity.ERROR)
    (typo,) = [e for e in errors if e.path.endswith("master.replicaCont")]
    assert typo.line == text.splitlines().index("          master: {replicaCont: 2}") + 1
    assert "Did you mean 'replicaCount'?" in typo.message
    ours = [e for e in errors if "fleetspec bug" in e.message]
    assert len(ours) == 4, [e.message for e in errors]  # one per toleration fleetspec renders
    assert len(errors) == 5
    assert all("node-feature-discovery.worker.tolerations[" in e.message for e in ours)


def test_cli_validate_render_and_plan_take_charts(tmp_path, monkeypatch) -> None:
    spec = tmp_path / "museum.yaml"
    spec.write_text(_museum(WRONG_TYPE))
    folder = charts_dir(tmp_path)
    runner = CliRunner()
    result = runner.invoke(app, ["validate", str(spec), "--charts", str(folder)])
    assert result.exit_code == 1
    line = spec.read_text().splitlines().index('            replicaCount: "two"') + 1
    assert f"museum.yaml:{line}:" in result.output and "'two' is not of type 'integer'" in result.output
    assert runner.invoke(app, ["validate", str(spec)]).exit_code == 0
    monkeypatch.setenv("FLEETSPEC_CHARTS", str(folder))
    assert runner.invoke(app, ["validate", str(spec)]).exit_code == 1
    rendered = runner.invoke(app, ["render", str(spec), "--out", str(tmp_path / "build")])
    assert rendered.exit_code == 1 and not (tmp_path / "build").exists()
    planned = runner.invoke(app, ["plan", str(spec), "--state", str(tmp_path / "state")])
    assert planned.exit_code == 1 and "replicaCount" in planned.output
    monkeypatch.delenv("FLEETSPEC_CHARTS")
    missing = runner.invoke(app, ["validate", str(spec), "--charts", str(tmp_path / "nowhere")])
    assert missing.exit_code == 64


def test_chart_folders_and_nested_archives_read_alike(tmp_path) -> None:
    """An unpacked chart (helm pull --untar) with its subchart as a folder reads the same
    as the archive; DIR is matched by Chart.yaml, not by file name."""
    import tarfile

    packed = charts_dir(tmp_path)
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    with tarfile.open(packed / "gpu-operator-v26.7.0.tgz") as archive:
        archive.extractall(unpacked, filter="data")
    sub = unpacked / "gpu-operator/charts"
    with tarfile.open(sub / "node-feature-discovery-0.19.0.tgz") as archive:
        archive.extractall(sub, filter="data")
    (sub / "node-feature-discovery-0.19.0.tgz").unlink()
    (unpacked / "gpu-operator").rename(unpacked / "whatever-name")
    charts, problems = read_charts(unpacked)
    assert problems == []
    folder_chart = charts[("gpu-operator", "26.7.0")]
    archived = read_chart(packed / "gpu-operator-v26.7.0.tgz")
    assert (folder_chart.values, folder_chart.dependencies) == (archived.values, archived.dependencies)
    assert [s.name for s in folder_chart.subcharts] == ["node-feature-discovery"]
    assert folder_chart.subcharts[0].schema == NFD_SCHEMA
    assert violations(folder_chart, {"node-feature-discovery": {"master": {"replicaCount": "x"}}})


def test_a_value_two_keywords_refuse_is_still_one_error(tmp_path) -> None:
    """tolerations is typed both beside its $ref and in the Kubernetes definition it points
    to (as upstream writes it): a string there breaks both, and is one error; a node
    selector value that is not a string breaks additionalProperties: {type: string}."""
    text = _museum("""\
    values:
      gpu-operator:
        node-feature-discovery:
          master:
            tolerations: none
            nodeSelector: {zone: 5}
""")
    errors = _site(_check(text, charts_dir(tmp_path)), Severity.ERROR)
    lines = text.splitlines()
    assert sorted((e.line, e.path.rsplit(".", 1)[-1]) for e in errors) == [
        (lines.index("            tolerations: none") + 1, "tolerations"),
        (lines.index("            nodeSelector: {zone: 5}") + 1, "zone")]
    assert any("5 is not of type 'string'" in e.message for e in errors)


@pytest.mark.parametrize(("broken", "said"), [
    ({"type": "integr"}, "cannot be applied (Unknown type 'integr'"),
    ({"type": "string", "pattern": "("}, "cannot be applied (missing )"),
    ({"$ref": "https://example.org/interval.json"}, "refers to https://example.org/interval.json, which fleetspec "
                                                    "does not fetch"),
])
def test_a_schema_fleetspec_cannot_apply_is_a_warning_not_a_traceback(tmp_path, broken, said) -> None:
    schema = json.loads(json.dumps(NFD_SCHEMA))
    schema["properties"]["gc"]["properties"]["interval"] = broken
    result = _check(_museum(GOOD), charts_dir(tmp_path, schema))
    assert result.valid
    (warning,) = _site(result, Severity.WARNING)
    assert said in warning.message and warning.message.startswith("gpu-operator: node-feature-discovery 0.19.0's")


def _parent(tmp_path, name: str, chart_yaml_extra: dict, files: dict | None = None):
    """A parent chart bundling the NFD stand-in as a subchart, with ``chart_yaml_extra``
    (its dependencies entry: alias, tags, ...) in Chart.yaml."""
    from tests.site.helm_charts import nfd_archive

    chart = {"apiVersion": "v2", "name": name, "version": "1.0.0", **chart_yaml_extra}
    archive = tmp_path / f"{name}-1.0.0.tgz"
    archive.write_bytes(chart_archive(chart, {"charts/node-feature-discovery-0.19.0.tgz": nfd_archive(),
                                              **(files or {})}))
    return archive


@pytest.mark.parametrize(("extra", "files", "values", "refused_at"), [
    # alias: the subchart's values live under the alias, and its schema applies there
    ({"dependencies": [{"name": "node-feature-discovery", "version": "0.19.0", "alias": "discovery"}]}, None,
     {"discovery": {"master": {"replicaCount": "x"}}}, ("discovery", "master", "replicaCount")),
    ({"dependencies": [{"name": "node-feature-discovery", "version": "0.19.0", "alias": "discovery"}]}, None,
     {"node-feature-discovery": {"master": {"replicaCount": "x"}}}, None),
    # tags: off when a tag is false and none is true; a condition that resolves wins over tags
    ({"dependencies": [{"name": "node-feature-discovery", "version": "0.19.0", "tags": ["discovery"]}]}, None,
     {"tags": {"discovery": False}, "node-feature-discovery": {"master": {"replicaCount": "x"}}}, None),
    ({"dependencies": [{"name": "node-feature-discovery", "version": "0.19.0", "tags": ["discovery"]}]}, None,
     {"tags": {"discovery": True}, "node-feature-discovery": {"master": {"replicaCount": "x"}}},
     ("node-feature-discovery", "master", "replicaCount")),
    ({"dependencies": [{"name": "node-feature-discovery", "version": "0.19.0", "tags": ["discovery"],
                        "condition": "nfd.on,nfd.enabled"}]}, None,
     {"tags": {"discovery": False}, "nfd": {"enabled": True}, "node-feature-discovery": {"master": {"replicaCount": "x"}}},
     ("node-feature-discovery", "master", "replicaCount")),
    # the first condition path that holds a boolean decides
    ({"dependencies": [{"name": "node-feature-discovery", "version": "0.19.0", "condition": "nfd.on,nfd.enabled"}]},
     None, {"nfd": {"on": False, "enabled": True}, "node-feature-discovery": {"master": {"replicaCount": "x"}}}, None),
    # apiVersion v1: the dependencies are in requirements.yaml
    ({"apiVersion": "v1"},
     {"requirements.yaml": "dependencies:\n- {name: node-feature-discovery, version: 0.19.0, condition: nfd.enabled}\n"},
     {"nfd": {"enabled": False}, "node-feature-discovery": {"master": {"replicaCount": "x"}}}, None),
    # a subchart no dependency names stays, under its own name
    ({}, None, {"node-feature-discovery": {"master": {"replicaCount": "x"}}},
     ("node-feature-discovery", "master", "replicaCount")),
])
def test_aliases_tags_conditions_and_v1_charts_like_helm(tmp_path, extra, files, values, refused_at) -> None:
    archive = _parent(tmp_path, "parent", extra, files)
    assert [v.path for v in violations(read_chart(archive), values)] == ([refused_at] if refused_at else [])
    if refused_at:
        with pytest.raises(HelmValuesError, match="/master/replicaCount"):
            HelmChart.load(archive).render(values, name="p", namespace="p")
    else:
        HelmChart.load(archive).render(values, name="p", namespace="p")


def test_values_yaml_is_read_as_helm_reads_it(tmp_path) -> None:
    """sigs.k8s.io/yaml (Helm's reader) keeps a bare date a string and makes every mapping
    key a string; PyYAML's safe loader would give a date object and an int key, which a
    schema asking for strings would refuse where Helm does not."""
    import yaml as pyyaml

    from tests.site.helm_charts import NFD_CHART, NFD_VALUES

    values = pyyaml.safe_dump(NFD_VALUES).replace("tag: null", "tag: 2024-01-01")
    values += "extraLabels:\n  1: one\n"
    schema = json.loads(json.dumps(NFD_SCHEMA))
    schema["properties"]["extraLabels"] = {"type": "object", "propertyNames": {"pattern": "^[0-9]+$"},
                                           "additionalProperties": {"type": "string"}}
    archive = tmp_path / "node-feature-discovery-0.19.0.tgz"
    archive.write_bytes(chart_archive(NFD_CHART, {"values.yaml": values, "values.schema.json": json.dumps(schema)}))
    chart = read_chart(archive)
    assert chart.values["image"]["tag"] == "2024-01-01" and chart.values["extraLabels"] == {"1": "one"}
    assert violations(chart, {}) == []
    HelmChart.load(archive).render({}, name="n", namespace="n")  # Helm accepts the same defaults



@pytest.mark.parametrize(("extra", "values", "refused_at"), [
    # Helm reads a dependency's alias and condition into Go strings: a number is its text
    ({"dependencies": [{"name": "node-feature-discovery", "version": "0.19.0", "condition": 5}]},
     {"node-feature-discovery": {"master": {"replicaCount": "x"}}}, ("node-feature-discovery", "master", "replicaCount")),
    ({"dependencies": [{"name": "node-feature-discovery", "version": "0.19.0", "alias": 5}]},
     {"5": {"master": {"replicaCount": "x"}}}, ("5", "master", "replicaCount")),
])
def test_a_dependency_field_that_yaml_reads_as_a_number_is_text_as_in_helm(tmp_path, extra, values, refused_at) -> None:
    archive = _parent(tmp_path, "parent", extra)
    assert [v.path for v in violations(read_chart(archive), values)] == [refused_at]
    with pytest.raises(HelmValuesError, match="/master/replicaCount"):
        HelmChart.load(archive).render(values, name="p", namespace="p")


def test_a_requirements_file_that_is_not_a_mapping_is_a_warning_not_a_traceback(tmp_path) -> None:
    archive = _parent(tmp_path, "parent", {"apiVersion": "v1"}, {"requirements.yaml": "- node-feature-discovery\n"})
    found, problems = read_charts(tmp_path)
    assert found == {} and problems == [f"{archive}: requirements.yaml is not a mapping"]


def test_an_unreadable_file_in_a_chart_folder_is_that_charts_warning(tmp_path, monkeypatch) -> None:
    """A chart folder with a file fleetspec cannot read (permissions; root, as tests run,
    reads everything, so the read fails by injection) is that chart's problem, named with
    the file, and the other charts in DIR still count."""
    import tarfile

    packed = charts_dir(tmp_path)
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    with tarfile.open(packed / "gpu-operator-v26.7.0.tgz") as archive:
        archive.extractall(unpacked, filter="data")
    (packed / "gpu-operator-v26.7.0.tgz").rename(unpacked / "gpu-operator-copy.tgz")
    unreadable = unpacked / "gpu-operator" / "values.yaml"
    read_bytes = type(unreadable).read_bytes

    def denied(path):
        if path == unreadable:
            raise PermissionError(13, "Permission denied", str(path))
        return read_bytes(path)

    monkeypatch.setattr(type(unreadable), "read_bytes", denied)
    charts, problems = read_charts(unpacked)
    assert problems == [f"{unreadable}: Permission denied"]
    assert list(charts) == [("gpu-operator", "26.7.0")]  # the archive beside it
