"""Site Ansible: ``ansible.vars`` (variables for the site's own playbooks and roles) and
``ansible.hooks`` (site playbooks that apply runs inside each wave, after the drain and
before verify, with the disruption class the site declares for them).

Variables can never override what fleetspec pins: every variable fleetspec's playbooks
read is named ``fleetspec_*`` and comes from the spec, so that prefix is refused. So is
every name Ansible itself reads, because ``group_vars/all.yml`` reaches every host and
the controller that runs the playbooks:

- every ``ansible_*`` name. Ansible's connection and privilege variables all carry the
  prefix (``ansible_connection``, ``ansible_host``, ``ansible_ssh_common_args`` (a
  ProxyCommand runs on the controller), ``ansible_become*``, ``ansible_python_interpreter``,
  ``ansible_shell_executable``, each connection and become plugin's own
  ``ansible_<plugin>_*``: https://docs.ansible.com/ansible/latest/inventory_guide/intro_inventory.html#connecting-to-hosts-behavioral-inventory-parameters),
  and so do the magic variables and the injected facts (``ansible_facts``,
  ``ansible_distribution``, ...). A prefix, not a list: a plugin added later is covered.
  No allow-list: a site that needs a connection setting (an SSH user, a jump host) sets
  it where apply's runner reads it (its inventory, ``ansible.cfg``, the environment),
  never in the spec, whose variables reach every host;
- the magic variables without the prefix
  (https://docs.ansible.com/ansible/latest/reference_appendices/special_variables.html):
  ``hostvars``, ``groups``, ``inventory_hostname``, ``omit``, ``playbook_dir``, ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetspec.compile import ir
from fleetspec.findings import Finding, Severity, SpecPath

# json and hashlib are imported where used: they are not needed when a spec has no site
# Ansible settings (startup time, benchmarks/README.md).

if TYPE_CHECKING:
    from fleetspec.spec import model as m

RULE = "site-settings"
PREFIX = "fleetspec_"
ANSIBLE_PREFIX = "ansible_"
# Where fleetspec's own variables come from (render/ansible.py), for the error message.
FLEETSPEC_VARS = {
    "fleetspec_stack": "spec.stacks", "fleetspec_packages": "spec.stacks", "fleetspec_apt_sources": "spec.stacks",
    "fleetspec_components": "spec.stacks", "fleetspec_slurm": "spec.slurm",
    "fleetspec_package_mirror": "spec.packages.mirror", "fleetspec_allow_reboot": "apply --allow-reboot",
    "fleetspec_os": "spec.os", "fleetspec_fleet": "metadata.name",
}
# Ansible's magic variables (special_variables.html); the ansible_* ones are refused by
# their prefix as well, and stay listed so the list reads as the page does.
SPECIAL = frozenset({
    "ansible_check_mode", "ansible_config_file", "ansible_dependent_role_names", "ansible_diff_mode",
    "ansible_forks", "ansible_inventory_sources", "ansible_limit", "ansible_loop", "ansible_loop_var",
    "ansible_index_var", "ansible_parent_role_names", "ansible_parent_role_paths", "ansible_play_batch",
    "ansible_play_hosts", "ansible_play_hosts_all", "ansible_play_role_names", "ansible_playbook_python",
    "ansible_role_names", "ansible_role_name", "ansible_collection_name", "ansible_run_tags",
    "ansible_search_path", "ansible_skip_tags", "ansible_verbosity", "ansible_version", "group_names",
    "groups", "hostvars", "inventory_dir", "inventory_file", "inventory_hostname", "inventory_hostname_short",
    "omit", "play_hosts", "ansible_play_name", "playbook_dir", "role_name", "role_names", "role_path",
    "ansible_facts", "ansible_local", "environment", "vars",
})


def check_vars(variables: Mapping[str, Any], path: SpecPath, findings: list[Finding]) -> str:
    """The variables as canonical JSON; a finding for each name fleetspec or Ansible owns."""
    import json

    kept = {}
    for name, value in variables.items():
        where = path + (name,)
        if name.startswith(PREFIX):
            source = FLEETSPEC_VARS.get(name, "the spec (fleetspec renders every fleetspec_* variable)")
            findings.append(Finding(RULE, Severity.ERROR, f"{name} is fleetspec's variable, set from {source}: a site "
                                    "variable must never override a pin. Set it there, or rename yours", where, "key"))
        elif name.lower().startswith(ANSIBLE_PREFIX):
            findings.append(Finding(RULE, Severity.ERROR, f"{name} is an Ansible variable (ansible_* names set how "
                                    "Ansible connects, escalates privilege and what it reports about a host), and "
                                    "ansible.vars reach every host and the controller: set connection or privilege "
                                    "settings in apply's own inventory or ansible.cfg, never in the spec, or rename "
                                    "a site variable (site_...)", where, "key"))
        elif name in SPECIAL:
            findings.append(Finding(RULE, Severity.ERROR, f"{name} is one of Ansible's special variables and cannot be "
                                    "set as a site variable; rename yours", where, "key"))
        elif _is_reference_form(value):
            ref = value[SECRET_KEY]
            if not isinstance(ref, str) or not _secret_ref_ok(ref):
                findings.append(Finding(RULE, Severity.ERROR, f"{name}: a secret reference is "
                                        "{secret: env:NAME | file:PATH | ansible-vault:PATH#KEY | "
                                        "hashicorp-vault:MOUNT/PATH#KEY | sops:PATH#KEY}; this is not one "
                                        "(the value is not shown)", where + (SECRET_KEY,)))
            else:
                kept[name] = {SECRET_KEY: ref}
        elif _holds_secret(name, value):
            findings.append(Finding(RULE, Severity.ERROR, f"{name} reads as a secret and holds a literal value: "
                                    "ansible.vars are written to group_vars/all.yml, the state and saved plans. "
                                    "Give a reference instead, resolved only at apply time: "
                                    f"{name}: {{secret: 'hashicorp-vault:MOUNT/PATH#KEY'}} (or env:, file:, "
                                    "ansible-vault:, sops:); if it is not a secret, rename the variable", where, "key"))
        else:
            kept[name] = value
    return json.dumps(kept, sort_keys=True, separators=(",", ":"))


SECRET_KEY = "secret"


def _is_reference_form(value: Any) -> bool:
    """``{secret: REF}``: a site variable whose value apply resolves from a secret source."""
    return isinstance(value, Mapping) and list(value) == [SECRET_KEY]


def _secret_ref_ok(ref: str) -> bool:
    import re

    from fleetspec.spec.model import SECRET_REF

    return len(ref) <= 4240 and re.match(SECRET_REF, ref) is not None and not ref.startswith("pulumi:")


def _holds_secret(name: str, value: Any) -> bool:
    """A key named like a secret (spec/loader.py SECRET_NAME: password, token, ...Pass) with
    a non-empty string under it, at any depth."""
    from fleetspec.spec.loader import is_secret_name

    if isinstance(value, dict):
        return any(_holds_secret(str(k), v) or (is_secret_name(name) and _holds_secret(name, v))
                   for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_secret(name, v) for v in value)
    return is_secret_name(name) and isinstance(value, str) and value != ""


def site_vars(fleet: ir.Fleet) -> dict[str, Any]:
    """The site's variables for ``group_vars/all.yml``: never the secret ones, which apply
    resolves and passes as extra vars of the runs (``site_secret_refs``)."""
    import json

    found = json.loads(fleet.site.ansible_vars) if fleet.site is not None else {}
    return {k: v for k, v in found.items() if not _is_reference_form(v)}


def site_secret_refs(fleet: ir.Fleet) -> dict[str, str]:
    """variable -> secret reference, for the site variables given as ``{secret: REF}``."""
    import json

    found = json.loads(fleet.site.ansible_vars) if fleet.site is not None else {}
    return {k: v[SECRET_KEY] for k, v in found.items() if _is_reference_form(v)}


def check_hooks(hooks: m.Hooks, partitions: Iterable[str], spec_dir: Path | None, path: SpecPath,
                findings: list[Finding]) -> tuple[ir.Hook, ...]:
    """Hooks in run order (``before`` ones, then ``after`` ones). A playbook must exist
    beside the spec (when the spec is a file) and name partitions the fleet has."""
    known = set(partitions)
    out = []
    for phase in ("before", "after"):
        for i, hook in enumerate(getattr(hooks, phase)):
            where = path + (phase, i)
            ok = True
            digest = ""
            if ".." in Path(hook.playbook).parts or hook.playbook.startswith("/"):
                findings.append(Finding(RULE, Severity.ERROR, f"hook playbook {hook.playbook!r} must be a path "
                                        "inside the spec's directory, relative to it; move it there",
                                        where + ("playbook",)))
                ok = False
            elif spec_dir is not None:
                try:
                    digest = hook_digest(spec_dir, hook.playbook)
                except HookFileError as e:
                    findings.append(Finding(RULE, Severity.ERROR, str(e), where + ("playbook",)))
                    ok = False
            for j, name in enumerate(hook.partitions):
                if name not in known:
                    findings.append(Finding(RULE, Severity.ERROR, f"hook partition '{name}' is not a partition of "
                                            f"this fleet; use one of: {', '.join(sorted(known))}",
                                            where + ("partitions", j)))
                    ok = False
            if ok:
                out.append(ir.Hook(hook.playbook, phase, hook.disruption,  # type: ignore[arg-type]
                                   tuple(hook.partitions), digest, where))
    return tuple(out)


MAX_HOOK_BYTES = 16 * 1024 * 1024  # as a spec (spec/loader.py): a playbook is YAML text of a few kB


class HookFileError(Exception):
    """A hook playbook that cannot be run: missing, outside the spec's directory once links
    are resolved, not a regular file, or too large. The message says what to do."""


def hook_file(spec_dir: Path, playbook: str) -> Path:
    """The hook playbook's real path: inside the spec's directory after every symbolic
    link (of the file and of each directory on the way) is resolved, and a regular file.
    A link to ``/etc/shadow``, or a directory linked to ``/tmp``, would otherwise pass the
    check and be run (and hashed) as the site's playbook."""
    base = spec_dir.resolve()
    path = base / playbook
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):  # missing, a dangling link, a loop of links
        raise HookFileError(f"hook playbook {playbook} does not exist beside the spec ({path}); add it or fix "
                            "the path") from None
    if not real.is_relative_to(base):
        raise HookFileError(f"hook playbook {playbook} resolves to {real}, outside the spec's directory {base} "
                            "(through a symbolic link); copy the playbook into the spec's directory instead "
                            "of linking to it")
    if not real.is_file():
        raise HookFileError(f"hook playbook {playbook} is not a regular file ({real}); point at a playbook file")
    return real


def hook_digest(spec_dir: Path, playbook: str) -> str:
    """The playbook's content hash (editing a hook is a change the plan shows), read with a
    bound: a multi-gigabyte file is an error, not a MemoryError."""
    import hashlib

    from fleetspec.safe_io import UnsafePathError, read_bounded

    real = hook_file(spec_dir, playbook)
    try:
        data = read_bounded(real, MAX_HOOK_BYTES)
    except UnsafePathError:
        raise HookFileError(f"hook playbook {playbook} is larger than {MAX_HOOK_BYTES // 2**20} MiB, too large for "
                            "a playbook; split it or point at the right file") from None
    except OSError as e:
        raise HookFileError(f"hook playbook {playbook} cannot be read ({e.strerror}); fix its permissions") from None
    return hashlib.sha256(data).hexdigest()[:16]


def hook_hosts(fleet: ir.Fleet, hook: ir.Hook, hosts: Iterable[str]) -> list[str]:
    """The hosts of ``hosts`` the hook runs on: nodes of its partitions (every node of the
    fleet when it names none)."""
    wanted = set(hook.partitions)
    return [h for h in hosts if (n := fleet.node(h)) is not None
            and (not wanted or n.partition in wanted or any(h in p.nodes for p in fleet.partitions
                                                              if p.name in wanted))]
