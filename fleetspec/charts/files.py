"""Helm charts an operator has on disk (``--charts DIR``): what fleetspec needs of each to
check values the way Helm does, read without unpacking anything and without running Helm.

``DIR`` holds what ``helm pull`` writes (``<name>-<version>.tgz``) or unpacked chart
folders (``helm pull --untar``). A chart is known by its ``Chart.yaml`` name and version,
not by its file name. Of each chart (and, recursively, of each subchart under its
``charts/``, as a folder or an archive, the way ``helm dependency build`` leaves them)
fleetspec reads ``Chart.yaml`` (its ``dependencies``: alias, condition, tags),
``requirements.yaml`` (the same list in apiVersion v1 charts), ``values.yaml`` and
``values.schema.json``. Helm's chart layout: https://helm.sh/docs/topics/charts/ ("The
Chart File Structure", "Schema Files"); its loader strips the archive's top folder and
refuses a file over 5 MiB once unpacked (helm/helm ``pkg/chart/loader/archive``,
``MaxDecompressedFileSize``), which is this module's limit too.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

MAX_FILE = 5 * 1024 * 1024  # Helm's MaxDecompressedFileSize
WANTED = frozenset({"Chart.yaml", "requirements.yaml", "values.yaml", "values.schema.json"})


class ChartReadError(Exception):
    """A chart file fleetspec cannot read; the message names the file and why."""


@dataclass(frozen=True)
class Dependency:
    """One ``dependencies`` entry of a chart: which subchart, under what values key, and
    what switches it on (``condition``: comma-separated value paths; ``tags``)."""

    name: str
    alias: str | None = None
    condition: str | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Chart:
    """What fleetspec reads of one chart: its identity, defaults, schema and subcharts."""

    name: str
    version: str
    values: Mapping[str, Any]
    schema: Mapping[str, Any] | bool | None
    dependencies: tuple[Dependency, ...] = ()
    subcharts: tuple[Chart, ...] = ()
    source: str = ""  # where it was read (for messages)
    alias: str | None = field(default=None, compare=False)  # set when a parent names it otherwise

    @property
    def key(self) -> str:
        """The parent's values key for this chart (Helm: the alias when there is one)."""
        return self.alias or self.name


class _ValuesLoader(yaml.SafeLoader):
    """YAML as Helm reads values: sigs.k8s.io/yaml turns a document into JSON, so a bare
    date stays a string (PyYAML's safe loader would make a ``datetime.date`` of it)."""


def _string_keys(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[str, Any]:
    """Mapping keys as JSON has them (sigs.k8s.io/yaml writes ``1:`` as ``"1"``, ``true:``
    as ``"true"``), so a schema's ``properties`` match them as they match in Helm."""
    loader.flatten_mapping(node)
    pairs = loader.construct_pairs(node, deep=True)
    return {json.dumps(k) if isinstance(k, bool) else str(k): v for k, v in pairs}


_ValuesLoader.add_constructor("tag:yaml.org,2002:map", _string_keys)
_ValuesLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def read_charts(directory: Path) -> tuple[dict[tuple[str, str], Chart], list[str]]:
    """Every chart in ``directory`` by (name, version without a leading 'v'), and one
    message for each entry that is not a readable chart."""
    found: dict[tuple[str, str], Chart] = {}
    problems: list[str] = []
    for entry in sorted(directory.iterdir()):
        if entry.is_dir() and not (entry / "Chart.yaml").is_file():
            continue  # not a chart folder (a cache, a .git): nothing to say
        if entry.is_file() and not entry.name.endswith((".tgz", ".tar.gz")):
            continue
        try:
            chart = read_chart(entry)
        except ChartReadError as exc:
            problems.append(str(exc))
            continue
        found.setdefault((chart.name, plain_version(chart.version)), chart)
    return found, problems


def read_chart(path: Path) -> Chart:
    """The chart in an archive or a chart folder."""
    if path.is_dir():
        return _chart(_folder_files(path), str(path))
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ChartReadError(f"{path}: {exc.strerror}") from None
    return _chart(_archive_files(data, str(path)), str(path))


def plain_version(version: str) -> str:
    """``v26.7.0`` and ``26.7.0`` name one chart version (Helm compares them as SemVer)."""
    return version[1:] if version[:1] in ("v", "V") and version[1:2].isdigit() else version


def _folder_files(root: Path) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink() or not path.is_file() or not _wanted(rel):
            continue
        try:
            if path.stat().st_size > MAX_FILE:
                raise ChartReadError(f"{path}: larger than Helm's 5 MiB limit for one chart file")
            files[rel] = path.read_bytes()
        except OSError as exc:  # that chart is unreadable, not the whole folder of charts
            raise ChartReadError(f"{path}: {exc.strerror}") from None
    return files


def _archive_files(data: bytes, where: str) -> dict[str, bytes]:
    """The wanted files of a chart archive, paths without its top folder; never unpacked
    to disk (a member's path is only a dictionary key here)."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            for member in archive:
                parts = PurePosixPath(member.name).parts
                if len(parts) < 2 or not member.isfile():
                    continue
                rel = "/".join(parts[1:])
                if not _wanted(rel):
                    continue
                if member.size > MAX_FILE:
                    raise ChartReadError(f"{where}: {member.name} is larger than Helm's 5 MiB limit for one chart file")
                handle = archive.extractfile(member)
                if handle is not None:
                    files[rel] = handle.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ChartReadError(f"{where}: not a chart archive ({exc})") from None
    return files


def _wanted(rel: str) -> bool:
    """Chart.yaml, values, schema and dependency list of the chart or of any subchart, and
    subchart archives (``charts/<name>-<version>.tgz``)."""
    parts = rel.split("/")
    if parts[-1] in WANTED:  # at the root or in charts/<sub>/, charts/<sub>/charts/<sub>/, ...
        return len(parts) % 2 == 1 and all(p == "charts" for p in parts[:-1][::2])
    return len(parts) >= 2 and parts[-2] == "charts" and parts[-1].endswith((".tgz", ".tar.gz"))


def _chart(files: dict[str, bytes], where: str) -> Chart:
    if "Chart.yaml" not in files:
        raise ChartReadError(f"{where}: no Chart.yaml (not a Helm chart)")
    meta = _yaml(files["Chart.yaml"], f"{where}: Chart.yaml")
    if not isinstance(meta, Mapping) or not meta.get("name") or not meta.get("version"):
        raise ChartReadError(f"{where}: Chart.yaml has no name or version")
    deps_doc, deps_file = meta.get("dependencies"), "Chart.yaml"
    if deps_doc is None and "requirements.yaml" in files:  # apiVersion v1 charts
        deps_file = "requirements.yaml"
        requirements = _yaml(files["requirements.yaml"], f"{where}: requirements.yaml") or {}
        if not isinstance(requirements, Mapping):
            raise ChartReadError(f"{where}: requirements.yaml is not a mapping")
        deps_doc = requirements.get("dependencies")
    values = _yaml(files["values.yaml"], f"{where}: values.yaml") if "values.yaml" in files else None
    if values is not None and not isinstance(values, Mapping):
        raise ChartReadError(f"{where}: values.yaml is not a mapping")
    schema = None
    if "values.schema.json" in files:
        try:
            schema = json.loads(files["values.schema.json"])
        except (ValueError, UnicodeDecodeError) as exc:
            raise ChartReadError(f"{where}: values.schema.json is not JSON ({exc})") from None
    subcharts = []
    for name, sub_files in sorted(_subchart_files(files, where).items()):
        subcharts.append(_chart(sub_files, f"{where}#charts/{name}"))
    return Chart(name=str(meta["name"]), version=str(meta["version"]), values=values or {}, schema=schema,
                 dependencies=tuple(_dependency(d, f"{where}: {deps_file}") for d in deps_doc or ()
                                    if isinstance(d, Mapping)),
                 subcharts=tuple(subcharts), source=where)


def _subchart_files(files: dict[str, bytes], where: str) -> dict[str, dict[str, bytes]]:
    """{entry under charts/: its files}, for subchart folders and subchart archives."""
    out: dict[str, dict[str, bytes]] = {}
    for rel, data in files.items():
        parts = rel.split("/")
        if parts[0] != "charts" or len(parts) < 2:
            continue
        if len(parts) == 2 and parts[1].endswith((".tgz", ".tar.gz")):
            out[parts[1]] = _archive_files(data, f"{where}#{rel}")
        elif len(parts) >= 3:
            out.setdefault(parts[1], {})["/".join(parts[2:])] = data
    return out


def _dependency(doc: Mapping[str, Any], where: str) -> Dependency:
    # Helm reads these fields into Go strings: a scalar (condition: 5) is its text there
    for key in ("alias", "condition"):
        if isinstance(doc.get(key), (Mapping, list)):
            raise ChartReadError(f"{where}: dependency {doc.get('name')!s}: {key} must be a string")
    tags = doc.get("tags") or ()
    return Dependency(name=str(doc.get("name", "")), alias=_text(doc.get("alias")),
                      condition=_text(doc.get("condition")),
                      tags=tuple(str(t) for t in tags) if isinstance(tags, list) else ())


def _text(value: Any) -> str | None:
    """A scalar field as the text Helm's Go string holds (``5`` -> "5"), None when empty."""
    if value is None or value == "":
        return None
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _yaml(data: bytes, where: str) -> Any:
    try:
        return yaml.load(data.decode("utf-8"), Loader=_ValuesLoader)  # a SafeLoader subclass
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ChartReadError(f"{where} is not YAML ({str(exc).splitlines()[0]})") from None
