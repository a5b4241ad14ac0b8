"""The catalog's YAML is the source of truth; fleetspec/catalog/_snapshot.py is what it
parses to, for a fast start. The snapshot must match the YAML, and an edit to the YAML
must be read from the YAML even before the snapshot is written again."""

from __future__ import annotations

import re

from fleetspec.catalog import Catalog, _snapshot, catalog_data, checksum, load_catalog, parse, snapshot

REGENERATE = "the catalog YAML changed: run `python3 -m fleetspec.catalog.snapshot` and commit fleetspec/catalog/_snapshot.py"


def test_the_snapshot_is_the_yaml_parsed():
    files = snapshot.files()
    assert snapshot.SNAPSHOT.read_text() == snapshot.text(files), REGENERATE
    # repr, not ==: True == 1 and 1.0 == 1, and the types must be the YAML's too
    assert repr(_snapshot.DATA) == repr(parse(files)), REGENERATE
    assert checksum(files) == _snapshot.CHECKSUM, REGENERATE


def test_the_shipped_catalog_comes_from_the_snapshot():
    assert load_catalog()._data is _snapshot.DATA


def test_an_edit_to_the_yaml_is_read_from_the_yaml_until_the_snapshot_is_written():
    files = snapshot.files()
    text = files["nvidia_stack.yaml"].decode()
    version = re.search(r'"([0-9]+\.[0-9]+\.[0-9]*)([0-9])"', text)
    bumped = version.group(1) + str((int(version.group(2)) + 1) % 10)  # same size: a version bump
    edited = {**files, "nvidia_stack.yaml": text.replace(version.group(0), f'"{bumped}"', 1).encode()}
    assert len(edited["nvidia_stack.yaml"]) == len(files["nvidia_stack.yaml"])

    data = catalog_data(edited)
    assert data is not _snapshot.DATA
    assert repr(data) == repr(parse(edited)) != repr(parse(files))
    assert f"'{bumped}'" in repr(Catalog(data)._data["nvidia"])


def test_content_moved_between_files_changes_the_checksum():
    files = snapshot.files()
    moved = dict(files)
    moved["gpus.yaml"], moved["amd_stack.yaml"] = files["amd_stack.yaml"], files["gpus.yaml"]
    assert checksum(moved) != checksum(files)


def test_nothing_fleetspec_runs_changes_the_shared_catalog(tmp_path):
    """`catalog_data` hands every caller the snapshot's dict itself, not a copy: one caller
    that changed it (a list appended to, a dict updated) would change the catalog for every
    later one in the process. Every command over every example leaves it as the YAML says."""
    from typer.testing import CliRunner

    from fleetspec.cli import app

    examples = sorted((snapshot.SNAPSHOT.parents[2] / "examples").glob("*.yaml"))
    assert examples
    runner = CliRunner()
    for spec in examples:
        for args in (["validate", str(spec)], ["partitions", str(spec), "--format", "json"],
                     ["render", str(spec), "--out", str(tmp_path / spec.stem)],
                     ["plan", str(spec), "--state", str(tmp_path / f"{spec.stem}-state"), "--format", "json"]):
            result = runner.invoke(app, args)
            assert result.exit_code == 0, (args, result.output)
    assert runner.invoke(app, ["catalog", "--format", "json"]).exit_code == 0
    assert runner.invoke(app, ["rules"]).exit_code == 0
    assert load_catalog()._data is _snapshot.DATA
    assert repr(_snapshot.DATA) == repr(parse(snapshot.files()))
