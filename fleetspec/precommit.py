"""The ``fleetspec-validate`` pre-commit hook (.pre-commit-hooks.yaml): ``fleetspec
validate`` over the files pre-commit passes, skipping YAML that is not a fleet spec
(no ``apiVersion: fleetspec.io/...`` line), so the hook can watch every YAML file of a
repository. Exit 1 when any spec has errors; warnings pass, as with ``validate``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

FLEET_SPEC = re.compile(r"^apiVersion:\s*['\"]?fleetspec\.io/", re.M)


def is_fleet_spec(path: Path) -> bool:
    try:
        return FLEET_SPEC.search(path.read_text(errors="replace")[:65536]) is not None
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    from fleetspec import tasks
    from fleetspec.cli import _print_findings

    failed = False
    for name in argv if argv is not None else sys.argv[1:]:
        path = Path(name)
        if not is_fleet_spec(path):
            continue
        compiled = tasks.validate(path)
        if compiled.findings or not compiled.valid:
            _print_findings(compiled)
        failed |= not compiled.valid
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
