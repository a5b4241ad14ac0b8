"""The startup reference: a minimal Typer app that loads fleetspec's dependencies
(typer, rich, pydantic, PyYAML) the way a CLI using them does, and does nothing.
Run with a path it parses that argument as `fleetspec validate PATH` does (Typer
checks and converts it); with no arguments it does not even that."""

from pathlib import Path
from typing import Annotated, Optional

import typer
import yaml  # noqa: F401
from pydantic import BaseModel  # noqa: F401
from rich.console import Console  # noqa: F401

app = typer.Typer(add_completion=False)


@app.command()
def main(spec: Annotated[Optional[Path], typer.Argument()] = None) -> None:  # noqa: UP045 - as users write it
    """Do nothing."""


if __name__ == "__main__":
    app()
