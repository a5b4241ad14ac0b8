"""Drive the Kubernetes layer through the Pulumi Automation API: ``preview`` and ``up``.

The program is ``stacks/kubernetes/program.py``, the same function ``pulumi up`` runs in
that folder, given the compiled Fleet in-process. State lives in a local file backend
under the fleet's state directory unless a backend URL is given; secrets use the
passphrase provider, the passphrase read from ``PULUMI_CONFIG_PASSPHRASE``.

The Automation API shells out to the ``pulumi`` CLI. Without it on PATH, nothing is
attempted: the result says so in one line, and the plan still shows the rendered
Kubernetes changes. Pulumi is imported only when a run happens, so importing this module
costs nothing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from fleetspec.compile.ir import Fleet

PROJECT = "fleetspec-kubernetes"
PASSPHRASE_ENV = "PULUMI_CONFIG_PASSPHRASE"
# The cluster to apply to, given to the program as stack config (fleetspec:context,
# fleetspec:kubeconfig): the program never uses the ambient kubectl context.
CONTEXT_ENV = "FLEETSPEC_KUBE_CONTEXT"
KUBECONFIG_ENV = "FLEETSPEC_KUBECONFIG"
DEFAULT_PROGRAM = Path(__file__).resolve().parents[2] / "stacks" / "kubernetes" / "program.py"

Operation = Literal["preview", "up"]
OutputCallback = Callable[[str], None]


@dataclass(frozen=True)
class PulumiOptions:
    """Where the stack lives. ``backend_url`` overrides the file backend under
    ``state_dir`` (``s3://...``, ``https://api.pulumi.com``, ``file://...``)."""

    state_dir: Path
    stack: str = "fleet"
    backend_url: str | None = None
    program_path: Path = DEFAULT_PROGRAM
    kube_context: str | None = field(default_factory=lambda: os.environ.get(CONTEXT_ENV) or None)
    kubeconfig: str | None = field(default_factory=lambda: os.environ.get(KUBECONFIG_ENV) or None)
    # Resolved spec secrets the layer turns into Kubernetes Secrets (Slinky's slurmdbd
    # password), by their spec name; set as secret stack config, never written anywhere.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def backend(self) -> str:
        return self.backend_url or (self.state_dir / "pulumi").resolve().as_uri()


@dataclass(frozen=True)
class PulumiResult:
    """The outcome of a preview or an up. ``available`` is False when it could not run at
    all (no CLI, no passphrase); ``summary`` is then the one line to show."""

    operation: Operation
    available: bool
    ok: bool
    summary: str
    changes: dict[str, int] = field(default_factory=dict)  # "create": 3, "same": 10, ...


def preview(fleet: Fleet, options: PulumiOptions,
            on_output: OutputCallback | None = None) -> PulumiResult:
    """What ``up`` would change, without changing anything."""
    return _run("preview", fleet, options, on_output)


def up(fleet: Fleet, options: PulumiOptions,
       on_output: OutputCallback | None = None) -> PulumiResult:
    """Apply the Kubernetes layer."""
    return _run("up", fleet, options, on_output)


def unavailable_reason(options: PulumiOptions) -> str | None:
    """Why a run cannot start here, in one line; None when it can."""
    if shutil.which("pulumi") is None:
        return ("pulumi CLI not found on PATH: Kubernetes changes are rendered under "
                "kubernetes/ but not previewed or applied")
    if options.backend_url is None and not os.environ.get(PASSPHRASE_ENV):
        return f"{PASSPHRASE_ENV} is not set: the file backend's secrets need a passphrase"
    if not options.kube_context:
        return (f"{CONTEXT_ENV} is not set: name the kubeconfig context of the fleet's cluster "
                f"(and {KUBECONFIG_ENV} for a kubeconfig other than the default)")
    return None


def load_program(path: Path = DEFAULT_PROGRAM) -> ModuleType:
    """Import ``stacks/kubernetes/program.py`` by path (it is a Pulumi project folder, not
    a package), so the Automation API runs exactly the program ``pulumi up`` runs."""
    spec = importlib.util.spec_from_file_location("fleetspec_stack_kubernetes", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the Pulumi program at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(operation: Operation, fleet: Fleet, options: PulumiOptions,
         on_output: OutputCallback | None) -> PulumiResult:
    reason = unavailable_reason(options)
    if reason is not None:
        return PulumiResult(operation, available=False, ok=False, summary=reason)
    from pulumi import automation as auto  # lazy: heavy, and needs the CLI anyway

    program = load_program(options.program_path)
    if options.backend_url is None:
        (options.state_dir / "pulumi").mkdir(parents=True, exist_ok=True)
    workspace = auto.LocalWorkspaceOptions(
        project_settings=auto.ProjectSettings(
            name=PROJECT, runtime="python", backend=auto.ProjectBackend(url=options.backend)),
        secrets_provider="passphrase",
    )
    try:
        stack = auto.create_or_select_stack(
            stack_name=options.stack, project_name=PROJECT,
            program=lambda: program.program(fleet), opts=workspace)
        stack.set_config(f"{program.CONFIG_NAMESPACE}:{program.CONTEXT_KEY}",
                         auto.ConfigValue(value=str(options.kube_context)))
        for name, value in sorted(options.secrets.items()):
            stack.set_config(f"{program.CONFIG_NAMESPACE}:{program.secret_config_key(name)}",
                             auto.ConfigValue(value=value, secret=True))
        if options.kubeconfig:
            stack.set_config(f"{program.CONFIG_NAMESPACE}:{program.KUBECONFIG_KEY}",
                             auto.ConfigValue(value=options.kubeconfig, secret=True))
        if operation == "preview":
            # refresh: read the cluster first. A node that left and rejoined comes back as a
            # new Node object without fleetspec's labels; only a refresh shows their NodePatch
            # as drifted, so that every preview shows it and every up puts the labels back.
            result = stack.preview(on_output=on_output, refresh=True)
            changes = {str(k): int(v) for k, v in (result.change_summary or {}).items()}
        else:
            result = stack.up(on_output=on_output, refresh=True)
            changes = {str(k): int(v) for k, v in (result.summary.resource_changes or {}).items()}
    except auto.errors.CommandError as err:
        first = str(err).strip().splitlines()
        return PulumiResult(operation, available=True, ok=False,
                            summary=f"pulumi {operation} failed: {first[0] if first else err}")
    return PulumiResult(operation, available=True, ok=True,
                        summary=f"pulumi {operation}: " + _describe(changes), changes=changes)


def _describe(changes: dict[str, int]) -> str:
    shown = [f"{n} to {k}" if k != "same" else f"{n} unchanged"
             for k, n in sorted(changes.items()) if n]
    return ", ".join(shown) or "no changes"
