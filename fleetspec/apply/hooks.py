"""Run fleetspec's playbooks with the site's hook playbooks around them (``ansible.hooks``):
the ``before`` hooks, then site.yml, then the ``after`` hooks, each limited to the hosts
of the run (a wave after its drain, or the converge run), and to the hook's partitions.
A hook that fails fails the run, so the wave stops and stays drained, before verify."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fleetspec.apply.ansible import HostResult, PlaybookResult
from fleetspec.compile.ir import Fleet, Hook
from fleetspec.site.ansible import hook_hosts

Say = Callable[[str], None]


def run_with_hooks(run_playbook: Callable[..., PlaybookResult], fleet: Fleet, hooks_dir: Path | None,
                   hosts: Sequence[str], say: Say, **kwargs: Any) -> PlaybookResult:
    """site.yml over ``hosts`` between the site's hooks; one result folding every run."""
    hooks = fleet.site.hooks if fleet.site is not None else ()
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
            results.append((hook.playbook, run_playbook(limit=targets, playbook=str(hooks_dir / hook.playbook),
                                                        **kwargs)))
        if any(not r.ok for _, r in results):
            break  # a failed hook or site.yml ends the run: the wave stops before verify
    return _folded(results)


def _stale(hooks_dir: Path | None, hook: Hook) -> str | None:
    """Why the hook playbook on disk is not the one the plan was made with, if it is not."""
    if hooks_dir is None or not (hooks_dir / hook.playbook).is_file():
        return f"not found beside the spec ({hooks_dir}); apply from the spec's directory"
    digest = hashlib.sha256((hooks_dir / hook.playbook).read_bytes()).hexdigest()[:16]
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
