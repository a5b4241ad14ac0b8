"""Chart values schemas: the values Helm would install for each release fleetspec renders,
checked against the chart's own ``values.schema.json`` the way Helm checks them, when the
operator has the chart on disk (``--charts DIR``, docs/site-settings.md).

The values checked are the release's values as the ``helm/`` tree writes them and the
Pulumi program declares them (``kubernetes_resources``: fleetspec's values with the
site's ``kubernetes.values`` overlay merged in), coalesced with the chart's defaults.

Helm's rules, followed here (helm/helm, Helm 4 ``pkg/chart/common/util/``; Helm 3 has the
same in ``pkg/chartutil/``; https://helm.sh/docs/topics/charts/#schema-files):

1. Subcharts switched off are dropped first (``ProcessDependencies``): a dependency's
   ``condition`` is a comma list of value paths, the first that holds a boolean decides;
   else its ``tags`` (``tags.<tag>`` in the top-level values): off when one is false and
   none is true. A subchart under ``charts/`` that no dependency names stays. Its schema
   does not apply once it is off.
2. The values validated are the coalesced ones (``values.go``
   ``ToRenderValuesWithSchemaValidation`` calls ``CoalesceValues`` and then
   ``ValidateAgainstSchema``; ``coalesce.go``): the chart's ``values.yaml`` under the
   supplied values (mappings merge, anything else replaces, a null removes the default);
   each subchart's ``values.yaml`` under its section of the parent's values (its alias,
   else its name); the parent's ``global`` merged into every subchart's ``global``,
   which Helm always adds (``{}`` at least); a subchart default that is null is dropped.
3. ``jsonschema.go`` ``ValidateAgainstSchema``: the chart's schema against all of its
   coalesced values, then each subchart's schema against its own section, recursively; a
   section that is absent or null is not checked, one that is not a mapping is an error.
4. The draft is the schema's ``$schema``, else 2020-12 (Helm's validator,
   santhosh-tekuri/jsonschema v6, defaults to its latest draft). ``format`` is asserted
   for draft-07 and older and is an annotation from 2019-09 on (that library's default,
   which Helm keeps). Patterns run on Python's ``re``, Helm's on Go's RE2: the same for
   the character classes and anchors chart schemas use.
5. Helm fetches a ``$ref`` to an http(s) URL; fleetspec fetches nothing, and says which
   values it could not check.

A violation is located at the spec line of the ``kubernetes.values`` key that wrote the
value. A value fleetspec rendered itself that the chart refuses is fleetspec's bug, and
the message says so; one only the chart's defaults hold is the chart's.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetspec.charts.files import Chart, read_charts
from fleetspec.findings import Finding, Severity, SpecPath

if TYPE_CHECKING:
    from fleetspec.compile.ir import Fleet

RULE = "site-settings"
WHERE = ("spec", "kubernetes")
MAX_MESSAGE = 240


@dataclass(frozen=True)
class Violation:
    """One value a chart's schema refuses: the charts from the release's chart down to
    the one whose schema it is, the path in the release's values, and what is wrong."""

    charts: tuple[Chart, ...]
    path: tuple[str | int, ...]
    message: str
    blame: tuple[str | int, ...] | None = None  # the path to blame when it is not ``path``
    hint: str = ""  # a did-you-mean for an unexpected key
    unchecked: bool = False  # the schema could not be applied (unresolvable $ref, invalid schema)


# --- Helm's rules -------------------------------------------------------------------

def enabled(chart: Chart, values: Mapping[str, Any]) -> Chart:
    """``chart`` with only the subcharts Helm keeps for ``values`` (rule 1), recursively."""
    full = coalesce(chart, values)
    return _enabled(chart, full, full.get("tags") if isinstance(full.get("tags"), Mapping) else {})


def _enabled(chart: Chart, full: Mapping[str, Any], tags: Mapping[str, Any]) -> Chart:
    kept = []
    declared = {d.name: d for d in chart.dependencies}
    for sub in chart.subcharts:
        dep = declared.get(sub.name)
        if dep is not None:
            sub = replace(sub, alias=dep.alias)
            on = True
            states = [tags.get(t) for t in dep.tags if isinstance(tags.get(t), bool)]
            if states and not any(states):
                on = False
            for cond in (dep.condition or "").split(","):
                value = _path_value(full, cond.strip()) if cond.strip() else None
                if isinstance(value, bool):
                    on = value
                    break
            if not on:
                continue
        section = full.get(sub.key)
        kept.append(_enabled(sub, section if isinstance(section, Mapping) else {}, tags))
    return replace(chart, subcharts=tuple(kept))


def _path_value(values: Mapping[str, Any], dotted: str) -> Any:
    node: Any = values
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def coalesce(chart: Chart, values: Mapping[str, Any], top: bool = True) -> dict[str, Any]:
    """The values Helm renders ``chart`` with (rule 2)."""
    defaults = copy.deepcopy(dict(chart.values))
    if not top:
        defaults = _without_nulls(defaults)
    out = _under(defaults, values)
    for sub in chart.subcharts:
        section = out.get(sub.key, {})
        if not isinstance(section, Mapping):
            continue  # Helm stops with "type mismatch"; the check reports it (rule 3)
        section = dict(section)
        section["global"] = _globals(section.get("global"), out.get("global"))
        out[sub.key] = coalesce(sub, section, top=False)
    return out


def _under(defaults: Mapping[str, Any], supplied: Mapping[str, Any]) -> dict[str, Any]:
    """``supplied`` over ``defaults``: mappings merge, anything else replaces, a null
    removes a default (and stays where there is none, as Helm keeps it)."""
    out = copy.deepcopy(dict(supplied))
    for key, default in defaults.items():
        if key not in out:
            out[key] = default
        elif out[key] is None and default is not None:
            del out[key]
        elif isinstance(out[key], Mapping) and isinstance(default, Mapping):
            out[key] = _under(default, out[key])
    return out


def _globals(own: Any, parent: Any) -> dict[str, Any]:
    out = dict(own) if isinstance(own, Mapping) else {}
    for key, value in (parent.items() if isinstance(parent, Mapping) else ()):
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _under(out[key], value)
        elif not isinstance(out.get(key), Mapping) or isinstance(value, Mapping):
            out[key] = copy.deepcopy(value)
    return out


def _without_nulls(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _without_nulls(v) if isinstance(v, dict) else v for k, v in values.items() if v is not None}


def violations(chart: Chart, values: Mapping[str, Any]) -> list[Violation]:
    """What the schemas of ``chart`` and its enabled subcharts refuse in the values Helm
    would install with ``values`` supplied (rules 1-5), one per value."""
    kept = enabled(chart, values)
    return list(_check(kept, coalesce(kept, values), (), (kept,)))


def _check(chart: Chart, values: Mapping[str, Any], at: tuple[str | int, ...],
           charts: tuple[Chart, ...]) -> Iterator[Violation]:
    if chart.schema is not None:
        yield from _schema_violations(chart.schema, values, at, charts)
    for sub in chart.subcharts:
        section = values.get(sub.key)
        if section is None:
            continue
        if not isinstance(section, Mapping):
            yield Violation(charts + (sub,), at + (sub.key,),
                            f"the values of subchart {sub.key} must be a mapping, not {_json_type(section)}")
            continue
        yield from _check(sub, section, at + (sub.key,), charts + (sub,))


def _schema_violations(schema: Any, values: Mapping[str, Any], at: tuple[str | int, ...],
                       charts: tuple[Chart, ...]) -> Iterator[Violation]:
    import jsonschema  # here: only --charts needs it (startup time)
    import referencing
    import referencing.exceptions
    from jsonschema.exceptions import best_match

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    old_draft = cls in (jsonschema.Draft4Validator, jsonschema.Draft6Validator, jsonschema.Draft7Validator)
    # No check_schema first: checking a 350 KB schema against the 2020-12 meta-schema takes
    # seconds (measured ~4 s for 480 KB), validating the values with it milliseconds. A
    # schema too broken to apply says so while it is applied (below).
    validator = cls(schema, registry=referencing.Registry(retrieve=_no_fetch),
                    format_checker=cls.FORMAT_CHECKER if old_draft else None)
    groups: dict[tuple[str | int, ...], list[Any]] = {}
    try:
        for error in validator.iter_errors(values):
            groups.setdefault(tuple(error.absolute_path), []).append(error)
    except referencing.exceptions.Unresolvable as exc:
        yield Violation(charts, at, f"its values.schema.json refers to {getattr(exc, 'ref', exc)}, which fleetspec "
                        "does not fetch (Helm would): these values are not checked against it", unchecked=True)
        return
    except (jsonschema.exceptions.SchemaError, jsonschema.exceptions.UnknownType, re.error, TypeError,
            AttributeError, KeyError, ValueError) as exc:  # a chart's schema is input: never a traceback
        yield Violation(charts, at, f"its values.schema.json cannot be applied ({_short(str(exc))}); it is not a "
                        "valid JSON Schema, and these values are not checked against it", unchecked=True)
        return
    for path, errors in sorted(groups.items(), key=lambda item: [str(p) for p in item[0]]):
        error = best_match(errors)
        blame = _blamed_key(error, at + path)
        yield Violation(charts, at + path, _short(error.message), blame, _hint(error, blame))


def _no_fetch(uri: str) -> Any:
    import referencing.exceptions

    raise referencing.exceptions.NoSuchResource(ref=uri)


def _blamed_key(error: Any, path: tuple[str | int, ...]) -> tuple[str | int, ...] | None:
    """For an unexpected or a missing key, the key's own path (where the site wrote or
    removed it), else None."""
    instance = error.instance if isinstance(error.instance, Mapping) else {}
    if error.validator in ("additionalProperties", "unevaluatedProperties") and error.validator_value is False:
        schema = error.schema
        known = set(schema.get("properties", {}))
        patterns = list(schema.get("patternProperties", {}))
        extra = [k for k in instance if k not in known and not any(re.search(p, k) for p in patterns)]
        if extra:
            return path + (extra[0],)
    if error.validator == "required":
        missing = [k for k in error.validator_value if k not in instance]
        if missing:
            return path + (missing[0],)
    return None


def _hint(error: Any, blame: tuple[str | int, ...] | None) -> str:
    """A did-you-mean for an unexpected key, from the properties the schema has there."""
    props = error.schema.get("properties") if isinstance(error.schema, Mapping) else None
    if blame is None or error.validator == "required" or not isinstance(props, Mapping):
        return ""
    close = difflib.get_close_matches(str(blame[-1]), list(props), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


def _json_type(value: Any) -> str:
    return {bool: "a boolean", int: "a number", float: "a number", str: "a string",
            list: "a list"}.get(type(value), "a mapping" if isinstance(value, Mapping) else "null")


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."


# --- fleetspec's releases -------------------------------------------------------------

def chart_findings(fleet: Fleet, charts_dir: Path) -> list[Finding]:
    """Findings for the releases of ``fleet`` whose charts are in ``charts_dir``, and one
    note that says what was checked and what could not be."""
    from fleetspec.render.kubernetes import kubernetes_resources

    releases = kubernetes_resources(fleet).releases
    if not releases:
        return []
    found, unreadable = read_charts(charts_dir)
    overlays = {name: json.loads(text) for name, text in (fleet.site.helm_values if fleet.site else ())}
    findings = [Finding(RULE, Severity.WARNING, f"--charts: {problem}", WHERE, "key") for problem in unreadable]
    checked, no_schema, missing = [], [], []
    for release in releases:
        name = release.chart.rsplit("/", 1)[-1]
        chart = found.get((name, _plain(release.version)))
        if chart is None:
            other = sorted(c.version for (n, _), c in found.items() if n == name)
            has = f"; {charts_dir} has {name} {', '.join(other)}, another version" if other else ""
            missing.append(f"{release.name} ({name} {release.version}: {_pull_hint(release)}{has})")
            continue
        schemas = [c for c in _walk(enabled(chart, release.values)) if c.schema is not None]
        if not schemas:
            no_schema.append(f"{release.name} ({name} {release.version})")
            continue
        checked.append(f"{release.name} ({', '.join(f'{c.name} {c.version}' for c in schemas)})")
        overlay = overlays.get(release.name, {})
        for v in violations(chart, release.values):
            findings.append(_finding(release, v, overlay))
    parts = []
    if checked:
        parts.append("checked against the values.schema.json of " + "; ".join(checked))
    if no_schema:
        parts.append("no values.schema.json (nothing to check): " + ", ".join(no_schema))
    if missing:
        parts.append(f"not in {charts_dir}, not checked: " + "; ".join(missing))
    findings.append(Finding(RULE, Severity.INFO, "Chart values schemas (--charts): " + ". ".join(
        p[0].upper() + p[1:] for p in parts), WHERE, "key"))
    return findings


def _walk(chart: Chart) -> Iterator[Chart]:
    yield chart
    for sub in chart.subcharts:
        yield from _walk(sub)


def _plain(version: str) -> str:
    from fleetspec.charts.files import plain_version

    return plain_version(version)


def _pull_hint(release: Any) -> str:
    if release.repo:
        return f"helm pull {release.chart} --repo {release.repo} --version {release.version} -d DIR"
    return f"helm pull {release.chart} --version {release.version} -d DIR"


def _finding(release: Any, v: Violation, overlay: Mapping[str, Any]) -> Finding:
    chart = v.charts[-1]
    whose = f"{chart.name} {chart.version}'s values.schema.json" + (
        f" (a subchart of {v.charts[0].name} {v.charts[0].version})" if len(v.charts) > 1 else "")
    dotted = _dotted(v.path) or "(top level)"
    if v.unchecked:
        return Finding(RULE, Severity.WARNING, f"{release.name}: {whose}: {v.message}",
                       _release_where(release.name, overlay))
    blame = v.blame or v.path
    site = _site_path(overlay, blame)
    section = tuple(c.key for c in v.charts[1:])
    if site is None and len(blame) > len(section) and blame[len(section)] == "global" and section:
        site = _site_path(overlay, blame[len(section):])  # a global the parent's values gave every subchart
    at = "" if blame == v.path else f" (at {dotted})"
    if site is not None:
        return Finding(RULE, Severity.ERROR,
                       f"{release.name} value {_dotted(blame)}: {v.message}{at}. {whose} refuses it, and so "
                       f"would helm install.{v.hint}",
                       ("spec", "kubernetes", "values", release.name) + site, "key" if v.blame else "value")
    if _has(release.values, v.path):
        return Finding(RULE, Severity.ERROR,
                       f"{release.name} value {dotted} as fleetspec renders it: {v.message}. {whose} refuses "
                       "it: this is a fleetspec bug, please report it; until it is fixed, set the value in "
                       f"kubernetes.values.{release.name}", _release_where(release.name, overlay))
    return Finding(RULE, Severity.ERROR,
                   f"{release.name} value {dotted} from the chart's own defaults: {v.message}. {whose} refuses "
                   f"it, and so would helm install: set it in kubernetes.values.{release.name}",
                   _release_where(release.name, overlay))


def _site_path(overlay: Any, path: Iterable[str | int]) -> tuple[str | int, ...] | None:
    """The part of ``path`` the overlay wrote: all of it when the overlay holds it (or a
    null that removed it), the prefix where the overlay put a whole value (a list, a
    string) that contains it; None when the overlay does not reach it."""
    node, walked = overlay, ()
    for key in path:
        child = _child(node, key)
        if child is _MISSING:
            return walked if walked and not isinstance(node, Mapping) else None
        node, walked = child, walked + (key,)
    return walked or None


def _has(values: Any, path: Iterable[str | int]) -> bool:
    node = values
    for key in path:
        node = _child(node, key)
        if node is _MISSING:
            return False
    return True


_MISSING = object()


def _child(node: Any, key: str | int) -> Any:
    if isinstance(node, Mapping):
        return node.get(key, _MISSING)
    if isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
        return node[key]
    return _MISSING


def _release_where(release: str, overlay: Mapping[str, Any]) -> SpecPath:
    """The release's overlay when the spec has one, else ``kubernetes`` itself."""
    return WHERE + ("values", release) if overlay else WHERE


def _dotted(path: Iterable[str | int]) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out
