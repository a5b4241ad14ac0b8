"""The fleetspec command line: thin. Each command calls one function in
`fleetspec.tasks` (or a feature package), prints its result and picks the exit code.

Exit codes (`fleetspec.exit_codes`): 0 success; 1 error (invalid spec, drift, failed
apply); 2 "changes present" for ``plan --detailed-exitcode``; 64 a usage error (bad
option, missing argument, value out of range), from every command.
"""

from __future__ import annotations

import gc
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fleetspec import __version__
from fleetspec.cli_lazy import command, lazy_group, sub_app
from fleetspec.cli_usage import ChartsOpt, UsageExitGroup
from fleetspec.console import command_class, lazy_consoles, set_verbosity
from fleetspec.exit_codes import ERROR, OK, USAGE

if TYPE_CHECKING:
    from fleetspec.findings import LocatedFinding
    from fleetspec.pipeline import CompileResult

# Imports are lazy: `fleetspec --help` and `version` load typer and nothing of the
# compiler; each command imports what it uses, and the commands that live in a feature
# package are imported (and built by Typer) only when they run or help lists them
# (fleetspec/cli_lazy.py; benchmarks/README.md).

COMMAND = command_class()
# Every command, in the order help lists them: each is built by Typer (and imported,
# when it lives in a feature package) only when it runs or help lists it.
COMMANDS = {
    "validate": command("validate", __name__, "validate", COMMAND),
    "partitions": command("partitions", __name__, "partitions", COMMAND),
    "render": command("render", __name__, "render", COMMAND),
    "schema": command("schema", __name__, "schema", COMMAND),
    "catalog": command("catalog", __name__, "catalog", COMMAND),
    "rules": command("rules", __name__, "rules", COMMAND),
    "plan": command("plan", "fleetspec.plan.cli", "plan", COMMAND),
    "apply": command("apply", "fleetspec.apply.cli", "apply", COMMAND),
    "verify": command("verify", "fleetspec.verify.cli", "verify", COMMAND),
    "health": command("health", "fleetspec.health.cli", "health", COMMAND),
    "version": command("version", __name__, "version", COMMAND),
    "lab": sub_app("lab", "fleetspec.lab.cli", "lab_app"),
    "state": sub_app("state", "fleetspec.state.cli", "state_app"),
    "import": sub_app("import", "fleetspec.importer.cli", "import_app"),
    "facts": sub_app("facts", "fleetspec.facts.cli", "facts_app"),
    "secrets": sub_app("secrets", __name__, "secrets_app"),
    "baremetal": sub_app("baremetal", "fleetspec.baremetal.cli", "baremetal_app"),
}


def _show_version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit()


def _root(
    ctx: typer.Context,
    version: Annotated[bool, typer.Option("--version", callback=_show_version, is_eager=True,
                                          help="print the fleetspec version and exit")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="more detail where a command has it "
                                          "(plan: every wave and each change's before and after)")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="only errors and the result line")] = False,
) -> None:
    """(With a callback, Typer makes a group of the commands above.)"""
    if verbose and quiet:
        raise typer.BadParameter("-v/--verbose and -q/--quiet exclude each other", param_hint="-q")
    set_verbosity(1 if verbose else -1 if quiet else 0)
    from fleetspec import config  # tomllib only when a config file exists

    try:
        found = config.load(config.config_path())
    except config.ConfigError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(USAGE) from None
    ctx.default_map = {**found.default_map(), **(ctx.default_map or {})}


app = typer.Typer(
    cls=lazy_group(UsageExitGroup, COMMANDS),
    callback=_root,
    name="fleetspec",
    help="Compile one YAML description of a GPU fleet into Ansible, Slurm and Kubernetes; "
    "plan, apply and verify it.",
    no_args_is_help=True,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},  # -h as well, in every command
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: real metavars, no '<bool>'
)
out, err = lazy_consoles()

SpecArg = Annotated[Path, typer.Argument(help="the fleet spec (YAML)", metavar="SPEC", show_default=False)]


class FindingsFormat(str, Enum):
    text = "text"
    json = "json"
    github = "github"
    sarif = "sarif"


class TableFormat(str, Enum):
    table = "table"
    json = "json"


def _print_findings(compiled: CompileResult, fmt: FindingsFormat = FindingsFormat.text) -> None:
    from fleetspec.console import verbosity
    from fleetspec.findings import Severity

    located = compiled.located()
    if fmt is FindingsFormat.json:
        import json

        out.print_json(json.dumps({"valid": compiled.valid, "findings": [f.to_dict() for f in located]}))
        return
    if fmt is FindingsFormat.sarif:
        import json

        from fleetspec.sarif import to_sarif

        print(json.dumps(to_sarif(compiled), indent=2))
        return
    if fmt is FindingsFormat.github:
        for f in located:
            level = {Severity.ERROR: "error", Severity.WARNING: "warning"}.get(f.severity, "notice")
            message = f.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
            print(f"::{level} file={_annotation_property(f.file)},line={f.line},col={f.column},"
                  f"title={_annotation_property(f.rule)}::{message}")
        return
    for f in located:
        if verbosity() >= 0 or f.severity >= Severity.ERROR:  # -q: errors only, then the summary
            _print_finding(f)
    errors = sum(f.severity >= Severity.ERROR for f in located)
    warnings = sum(f.severity == Severity.WARNING for f in located)
    summary = f"{errors} error(s), {warnings} warning(s)"
    if compiled.suppressed:
        summary += f", {len(compiled.suppressed)} suppressed"
    err.print(summary if located else f"{compiled.source.file}: valid (no findings)", markup=False)


def _annotation_property(value: object) -> str:
    """A workflow-command property escaped as @actions/core's ``escapeProperty`` does: a
    file name with ',' or ':' would otherwise end the property or start another."""
    return (str(value).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
            .replace(":", "%3A").replace(",", "%2C"))


def _print_finding(f: LocatedFinding) -> None:
    from rich.markup import escape

    from fleetspec.findings import Severity

    color = {Severity.ERROR: "red", Severity.WARNING: "yellow"}.get(f.severity, "cyan")
    err.print(f"{escape(f.file)}:{f.line}:{f.column}: [{color}]{f.severity}[/] {escape(f'[{f.rule}]')} "
              f"{escape(f.message)}", markup=True)
    if f.source_line:
        err.print(f"  {f.source_line}", markup=False)
        err.print("  " + " " * f.caret + "^", markup=False)


def validate(
    spec: SpecArg,
    format: Annotated[FindingsFormat, typer.Option("--format", help="text, json, github (workflow annotations) "
                                                   "or sarif (code scanning)")] = FindingsFormat.text,
    charts: ChartsOpt = None,
) -> None:
    """Check a fleet spec: exit 0 when it has no errors (warnings allowed), 1 when it has."""
    from fleetspec import tasks

    compiled = tasks.validate(spec, charts)
    _print_findings(compiled, format)
    raise typer.Exit(OK if compiled.valid else ERROR)


def partitions(
    spec: SpecArg,
    format: Annotated[TableFormat, typer.Option("--format", help="table or json")] = TableFormat.table,
) -> None:
    """Show the partitions the fleet compiles to (by owner, vendor and generation)."""
    from rich.table import Table

    from fleetspec import tasks

    result = tasks.partitions(spec)
    if not result.compiled.valid:
        _print_findings(result.compiled)
        raise typer.Exit(ERROR)
    if format is TableFormat.json:
        import json

        out.print_json(json.dumps({"partitions": result.partitions}))
        return
    table = Table(title=f"partitions of {spec}")
    for column in ("partition", "owner", "vendor", "generation", "GPU models", "nodes", "GPUs", "stack", "tuple"):
        table.add_column(column)
    for p in result.partitions:
        tuple_text = " ".join(f"{k}={v}" for k, v in (p["tuple"] or {}).items())
        table.add_row(p["name"], p["scheduler"], p["vendor"] or "MIXED", p["generation"] or "MIXED",
                      ",".join(p["gpu_models"]), str(len(p["nodes"])), str(p["gpus"]), p["stack"] or "MIXED",
                      tuple_text)
    out.print(table)


def render(
    spec: SpecArg,
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="output directory (replaced as a whole)")] = Path("build"),
    charts: ChartsOpt = None,
) -> None:
    """Write fleet.json and the Slurm, Ansible and Kubernetes files; nothing when the spec has errors."""
    from fleetspec import tasks
    from fleetspec.render.writer import RenderWriteError

    try:
        result = tasks.render(spec, out_dir, charts)
    except RenderWriteError as exc:
        err.print(f"error: {exc}", markup=False)
        raise typer.Exit(ERROR) from None
    except OSError as exc:
        err.print(f"error: cannot write {out_dir}: {exc.strerror}. Check the path and permissions", markup=False)
        raise typer.Exit(ERROR) from None
    if not result.written:
        _print_findings(result.compiled)
        err.print(f"nothing written: fix the errors above, then render again into {out_dir}", markup=False)
        raise typer.Exit(ERROR)
    if result.compiled.findings:
        _print_findings(result.compiled)
    out.print(f"wrote {len(result.files)} files to {result.out}", markup=False)


def schema() -> None:
    """Print the JSON Schema of the spec (for editors: yaml-language-server)."""
    import json

    from fleetspec import tasks

    print(json.dumps(tasks.spec_json_schema(), indent=2))


def catalog(
    format: Annotated[TableFormat, typer.Option("--format", help="table or json")] = TableFormat.table,
) -> None:
    """List what the catalog knows: GPU models, CUDA, drivers, NCCL, cuDNN, ROCm, operators, Slurm."""
    from rich.table import Table

    from fleetspec.catalog import load_catalog

    summary = load_catalog().summary()
    if format is TableFormat.json:
        import json

        out.print_json(json.dumps(summary))
        return
    table = Table(title="GPU models")
    for column in ("id", "vendor", "generation", "arch", "interconnect", "memory", "gres", "min CUDA/ROCm",
                   "min driver", "aliases"):
        table.add_column(column)
    for g in summary["gpus"]:
        table.add_row(g["id"], g["vendor"], g["generation"], g["arch"] or "", g["interconnect"] or "",
                      f"{g['memory_gb']} GB" if g["memory_gb"] else "", g["gres"],
                      g["min_cuda"] or g["min_rocm"] or "", g["min_driver"] or "", ", ".join(g["aliases"]))
    out.print(table)
    for key in ("cuda", "driver_branches", "nccl", "cudnn", "gpu_operator", "slurm"):
        out.print(f"[bold]{key}[/]: {', '.join(str(v) for v in summary[key])}")
    out.print("[bold]rocm -> rccl[/]: " + ", ".join(f"{k}->{v}" for k, v in summary["rocm"].items()))


def rules() -> None:
    """List the rule ids (public: suppress warnings by id in spec.suppress)."""
    from rich.table import Table

    from fleetspec.rules import RULES

    table = Table()
    for column in ("id", "severity", "suppressible", "summary"):
        table.add_column(column)
    for rule in RULES:
        table.add_row(rule.id, str(rule.severity), "warnings" if rule.suppressible else "no", rule.summary)
    out.print(table)


def _fleet_or_exit(spec: Path):  # type: ignore[no-untyped-def]
    """The compiled fleet, or the findings printed and exit 1 when it could not be built."""
    from fleetspec import tasks

    compiled = tasks.validate(spec)
    if compiled.fleet is None:
        _print_findings(compiled)
        raise typer.Exit(ERROR)
    return compiled.fleet


secrets_app = typer.Typer(cls=UsageExitGroup, help="Create and check the secrets the spec refers to (values are never printed).",
                          no_args_is_help=True, rich_markup_mode=None)


@secrets_app.command("init", cls=COMMAND)
def secrets_init(spec: SpecArg) -> None:
    """Create missing file secrets (munge key, database password) with mode 0600; never overwrite."""
    from fleetspec import secrets as sec

    fleet = _fleet_or_exit(spec)
    result = sec.init(fleet, Path(spec).resolve().parent)
    for line in result.created:
        out.print(f"created {line}", markup=False)
    for line in result.existing:
        out.print(f"exists  {line} (left as it is)", markup=False)
    for line in result.skipped:
        out.print(f"skipped {line}: not a file fleetspec can create", markup=False)
    for warning in result.warnings:
        err.print(f"warning: {warning}", markup=False)


@secrets_app.command("check", cls=COMMAND)
def secrets_check(spec: SpecArg) -> None:
    """Resolve every secret reference; exit 1 if one cannot be resolved."""
    from fleetspec import secrets as sec

    fleet = _fleet_or_exit(spec)
    failed = False
    for ref in sec.refs(fleet):
        if ref.kind == "pulumi":
            out.print(f"{ref.name}: {ref} (resolved by Pulumi at apply time)", markup=False)
            continue
        try:
            sec.resolve(ref, Path(spec).resolve().parent)
            out.print(f"{ref.name}: ok ({ref})", markup=False)
        except sec.SecretError as exc:
            failed = True
            err.print(f"{ref.name}: {exc}", markup=False)
    raise typer.Exit(ERROR if failed else OK)


def version() -> None:
    """Print the fleetspec version."""
    print(__version__)


def main() -> None:
    # One command per process: what is loaded by now lives until exit (freeze keeps the
    # collector from scanning it again), and a young generation of 100,000 objects keeps
    # the collector from turning parsing and rendering 100,000 nodes quadratic.
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    main()
