"""Run fleetspec's playbooks with the site's hook playbooks around them (``ansible.hooks``):
the ``before`` hooks, then site.yml, then the ``after`` hooks, each limited to the hosts
of the run (a wave after its drain, or the converge run), and to the hook's partitions.
A hook that fails fails the run, so the wave stops and stays drained, before verify."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fleetspec.apply.ansible import HostResult, PlaybookResult
from fleetspec.compile.ir import Fleet, Hook
from fleetspec.site.ansible import HookFileError, hook_digest, hook_file, hook_hosts, site_secret_refs

Say = Callable[[str], None]
# The extra vars a hook run gets: only what describes the run. apply's other extra vars
# are secrets fleetspec's own roles need (the slurmdbd password, the munge key's path on
# the controller: apply/cli.py _secrets); a site playbook has no use for them, and
# whatever it logs or writes would carry them.
HOOK_EXTRAVARS = frozenset({"fleetspec_allow_reboot", "fleetspec_drained"})


def hook_kwargs(kwargs: dict[str, Any], site_secrets: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The run's arguments for a hook: extra vars cut to HOOK_EXTRAVARS and the site's own
    secret variables (``ansible.vars`` given as ``{secret: REF}``)."""
    extravars = kwargs.get("extravars") or {}
    keep = HOOK_EXTRAVARS | site_secrets
    return {**kwargs, "extravars": {k: v for k, v in extravars.items() if k in keep}}


def run_with_hooks(run_playbook: Callable[..., PlaybookResult], fleet: Fleet, hooks_dir: Path | None,
                   hosts: Sequence[str], say: Say, **kwargs: Any) -> PlaybookResult:
    """site.yml over ``hosts`` between the site's hooks; one result folding every run."""
    hooks = fleet.site.hooks if fleet.site is not None else ()
    site_secrets = frozenset(site_secret_refs(fleet))
    results: list[tuple[str | None, PlaybookResult]] = []
    for phase in ("before", "site", "after"):
        if phase == "site":
            results.append((None, run_playbook(limit=list(hosts), **kwargs)))
        for hook in (h for h in hooks if h.phase == phase):
            targets = hook_hosts(fleet, hook, hosts)
            if not targets:
                continue
            problem = _stale(hooks_dir, hook)
            if problem:
                return PlaybookResult(False, {h: HostResult(failed=True, failures=(f"{hook.playbook}: {problem}",))
                                              for h in targets}, "failed", 1)
            say(f"site hook {hook.playbook} ({hook.phase}) on {', '.join(targets)}")
            assert hooks_dir is not None  # _stale said so
            results.append((hook.playbook, run_playbook(limit=targets, playbook=str(hook_file(hooks_dir, hook.playbook)),
                                                        **hook_kwargs(kwargs, site_secrets))))
        if any(not r.ok for _, r in results):
            break  # a failed hook or site.yml ends the run: the wave stops before verify
    return _folded(results)


def _stale(hooks_dir: Path | None, hook: Hook) -> str | None:
    """Why the hook playbook on disk is not the one the plan was made with, if it is not."""
    if hooks_dir is None:
        return "not found beside the spec (no spec directory); apply from the spec's directory"
    try:
        digest = hook_digest(hooks_dir, hook.playbook)  # links resolved inside the directory, read bounded
    except HookFileError as e:
        return str(e)
    if hook.digest and digest != hook.digest:
        return "changed since the plan was made: plan again"
    return None


def _folded(results: list[tuple[str | None, PlaybookResult]]) -> PlaybookResult:
    """Per host: changes added up, failures kept with the hook that failed them."""
    hosts: dict[str, HostResult] = {}
    for name, result in results:
        for host, r in result.hosts.items():
            seen = hosts.get(host, HostResult())
            failures = tuple(f"{name}: {f}" for f in r.failures) if name else r.failures
            hosts[host] = HostResult(seen.changed + r.changed, seen.failed or r.failed,
                                     seen.unreachable or r.unreachable, seen.failures + failures)
    failed = next((r for _, r in results if not r.ok), None)
    last = failed or results[-1][1]
    return PlaybookResult(failed is None, hosts, last.status, last.rc)
