"""Write ``_snapshot.py``: the catalog's YAML files parsed, as a Python literal.

Run after editing ``data/*.yaml`` (tests/test_catalog_snapshot.py fails until then, and
until then fleetspec reads the YAML: see ``catalog_data``)::

    python3 -m fleetspec.catalog.snapshot

On a merge conflict in ``_snapshot.py``, take either side and run it again.
"""

from __future__ import annotations

import pprint
from pathlib import Path

from fleetspec.catalog import _FILES, checksum, parse

HERE = Path(__file__).resolve().parent
SNAPSHOT = HERE / "_snapshot.py"

HEADER = '''"""The catalog's data files (data/*.yaml) parsed: written by
`python3 -m fleetspec.catalog.snapshot`, never by hand. The YAML is the source of truth;
this is used only while CHECKSUM matches the YAML's bytes (fleetspec.catalog.catalog_data).
"""

'''


def files() -> dict[str, bytes]:
    """The catalog files as they are in this tree."""
    return {name: (HERE / "data" / name).read_bytes() for name in _FILES.values()}


def text(catalog_files: dict[str, bytes]) -> str:
    """The snapshot module for ``catalog_files``."""
    data = pprint.pformat(parse(catalog_files), width=113, sort_dicts=False).replace("\n", "\n" + " " * 7)
    return f"{HEADER}CHECKSUM = {checksum(catalog_files):#010x}\n\nDATA = {data}\n"


def main() -> None:
    SNAPSHOT.write_text(text(files()))
    print(f"wrote {SNAPSHOT}")


if __name__ == "__main__":
    main()
