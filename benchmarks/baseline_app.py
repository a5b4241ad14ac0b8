"""The startup reference: a minimal Typer app that loads fleetspec's dependencies
(typer, rich, pydantic, PyYAML) the way a CLI using them does, and does nothing."""

import typer
import yaml  # noqa: F401
from pydantic import BaseModel  # noqa: F401
from rich.console import Console  # noqa: F401

app = typer.Typer(add_completion=False)


@app.command()
def main() -> None:
    """Do nothing."""


if __name__ == "__main__":
    app()
