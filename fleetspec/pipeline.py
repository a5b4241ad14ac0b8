"""The pipeline from a fleet file to a checked Fleet IR.

``compile_file(path)`` loads the YAML (with positions), validates it against the
v1alpha1 model, builds the IR (``fleetspec.compile``), checks the site's escape hatches
(``fleetspec.site``) and runs every rule (``fleetspec.rules``); with ``charts`` it also
checks the rendered Helm values against the charts' schemas (``fleetspec.charts``, a stage
after render). It sits above all of them (docs/architecture.md). The result carries the fleet (or
None when the file could not be read at all), the findings in spec order, and the
source map that locates them.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from fleetspec.compile.ir import Fleet
from fleetspec.findings import Finding, LocatedFinding, Severity, locate

if TYPE_CHECKING:
    from fleetspec.catalog import Catalog
    from fleetspec.compile.compiler import Built
    from fleetspec.spec.loader import LoadedSpec, SourceMap, SpecLoadError
    from fleetspec.spec.model import FleetSpec

# pydantic, the spec model, the loader and the catalog are imported when a spec is
# compiled, not when a module that names these types is imported (startup time).


# A NamedTuple, like Finding (fleetspec/findings.py).
class CompileResult(NamedTuple):
    """The compiled fleet (None when it could not be built), its findings and the source map."""

    fleet: Fleet | None
    findings: tuple[Finding, ...]
    source: SourceMap
    suppressed: tuple[Finding, ...] = ()
    built: Built | None = None  # with ``keep=True``: for compiling another revision beside (plan --base)

    @property
    def valid(self) -> bool:
        return self.fleet is not None and not any(f.severity >= Severity.ERROR for f in self.findings)

    def located(self) -> list[LocatedFinding]:
        located = [locate(f, self.source) for f in self.findings]
        return sorted(located, key=lambda f: (f.line, f.column, -f.severity, f.rule, f.message))


def compile_file(path: str | os.PathLike[str], catalog: Catalog | None = None,
                 charts: str | os.PathLike[str] | None = None, *, keep: bool = False,
                 beside: Built | None = None) -> CompileResult:
    """Compile the spec at ``path``; with ``charts`` (a folder of Helm charts), also check
    each release's values against its chart's values.schema.json (fleetspec/charts/values_schema.py).
    ``keep``: the result carries what the build made (``built``); ``beside``: such a build of
    another revision of the spec, whose fleet is reused when only the stacks' pins differ
    (``compiler.build_beside``): ``plan --base`` compiles the base beside the spec."""
    from fleetspec.spec.loader import SpecLoadError, load_file

    try:
        loaded = load_file(path)
    except SpecLoadError as exc:
        return _load_failure(exc)
    return compile_loaded(loaded, catalog, charts, keep=keep, beside=beside)


def compile_text(text: str, name: str = "<input>", catalog: Catalog | None = None, *, keep: bool = False,
                 beside: Built | None = None) -> CompileResult:
    from fleetspec.spec.loader import SpecLoadError, load_text

    try:
        loaded = load_text(text, name)
    except SpecLoadError as exc:
        return _load_failure(exc)
    return compile_loaded(loaded, catalog, keep=keep, beside=beside)


def compile_loaded(loaded: LoadedSpec, catalog: Catalog | None = None,
                   charts: str | os.PathLike[str] | None = None, *, keep: bool = False,
                   beside: Built | None = None) -> CompileResult:
    from pydantic import ValidationError

    from fleetspec.catalog import load_catalog
    from fleetspec.compile.compiler import build_beside, build_fleet, build_kept
    from fleetspec.rules import run_rules
    from fleetspec.spec.model import FleetSpec
    from fleetspec.spec.plain_text import text_findings
    from fleetspec.spec.schema_errors import schema_findings

    catalog = catalog or load_catalog()
    if not isinstance(loaded.data, dict):
        finding = Finding("schema", Severity.ERROR,
                          "a fleet file is a mapping with apiVersion, kind, metadata and spec. "
                          "Start from examples/quickstart.yaml")
        return CompileResult(None, (finding,), loaded.source)
    refused = text_findings(loaded.data)
    try:
        spec = FleetSpec.model_validate(loaded.data)
    except ValidationError as exc:
        return CompileResult(None, tuple(refused + schema_findings(exc, FleetSpec, loaded.source)), loaded.source)
    if refused:
        return CompileResult(None, tuple(refused), loaded.source)
    site_gpus: list[Finding] = []
    if spec.spec.gpu_models:
        catalog = _with_site_gpus(spec, catalog, site_gpus)
    kept_build = None
    if keep:
        fleet, findings, kept_build = build_kept(spec, catalog)
    else:
        reused = build_beside(spec, catalog, beside) if beside is not None else None
        fleet, findings = reused if reused is not None else build_fleet(spec, catalog)
    findings[:0] = site_gpus
    fleet = _with_site_settings(spec, fleet, loaded, findings)
    findings.extend(run_rules(fleet, catalog))
    if charts is not None:
        findings.extend(_chart_findings(fleet, Path(charts)))
    kept, suppressed = _apply_suppressions(fleet, findings)
    return CompileResult(fleet, tuple(kept), loaded.source, tuple(suppressed), kept_build)


def _with_site_gpus(spec: FleetSpec, catalog: Catalog, findings: list[Finding]) -> Catalog:
    """The catalog with the site's GPU models; one that shadows a catalog model (by id,
    alias or name) is an error and left out: the catalog's sourced facts win."""
    models = {}
    for gpu_id, model in spec.spec.gpu_models.items():
        known = catalog.gpu(gpu_id) or catalog.gpu(model.name)
        if known is not None:
            findings.append(Finding("schema", Severity.ERROR, f"spec.gpu_models.{gpu_id} is the catalog's "
                                    f"{known.id} ({known.name}): use gpu.model: {known.id}, which has sourced "
                                    "facts, and remove this declaration", ("spec", "gpu_models", gpu_id), "key"))
            continue
        models[gpu_id] = model.model_dump()
    return catalog.with_site_models(models)


def _with_site_settings(spec: FleetSpec, fleet: Fleet, loaded: LoadedSpec, findings: list[Finding]) -> Fleet:
    """The fleet with the spec's escape hatches (fleetspec/site), checked."""
    from fleetspec.site import site_settings

    spec_file = Path(loaded.source.file)
    site, problems = site_settings(spec, fleet, spec_file.parent if spec_file.is_file() else None, _release_names)
    findings.extend(problems)
    return dataclasses.replace(fleet, site=site) if site is not None else fleet


def _release_names(fleet: Fleet) -> list[str]:
    """The Helm releases the Kubernetes renderer installs for ``fleet`` (``kubernetes.values``
    may overlay only these); rendered only when the spec has such overlays."""
    from fleetspec.render.kubernetes import kubernetes_resources

    return [r.name for r in kubernetes_resources(fleet).releases]


def _chart_findings(fleet: Fleet, charts: Path) -> list[Finding]:
    """The chart values-schema check, or one error saying why it could not run."""
    where = ("spec", "kubernetes")
    try:
        from fleetspec.charts.values_schema import chart_findings

        return chart_findings(fleet, charts)
    except ImportError as exc:
        return [Finding("site-settings", Severity.ERROR, f"--charts needs the jsonschema package ({exc}): "
                        "pip install 'fleetspec[charts]'", where)]
    except OSError as exc:
        return [Finding("site-settings", Severity.ERROR, f"--charts {charts}: {exc.strerror or exc}", where)]


def _apply_suppressions(fleet: Fleet, findings: list[Finding]) -> tuple[list[Finding], list[Finding]]:
    from fleetspec.rules import RULES_BY_ID

    kept: list[Finding] = []
    suppressed: list[Finding] = []
    wanted = set(fleet.suppress)
    for i, rule_id in enumerate(fleet.suppress):
        rule = RULES_BY_ID.get(rule_id)
        path = ("spec", "suppress", i)
        if rule is None:
            kept.append(Finding("schema", Severity.WARNING,
                                f"'{rule_id}' is not a rule id; nothing is suppressed. Run 'fleetspec rules' for the ids",
                                path))
        elif not rule.suppressible:
            kept.append(Finding("schema", Severity.WARNING,
                                f"'{rule_id}' reports errors, and errors cannot be suppressed. Fix the spec instead",
                                path))
    for f in findings:
        if f.rule in wanted and f.severity < Severity.ERROR:
            suppressed.append(f)
        else:
            kept.append(f)
    return kept, suppressed


def _load_failure(exc: SpecLoadError) -> CompileResult:
    from fleetspec.spec.loader import Position, SourceMap

    source = SourceMap(file=exc.file)
    source.values[()] = Position(exc.line, exc.column)
    finding = Finding("invalid-yaml", Severity.ERROR, exc.message, ())
    return CompileResult(None, (finding,), source)


__all__ = ["CompileResult", "compile_file", "compile_loaded", "compile_text"]
