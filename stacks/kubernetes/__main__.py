"""Entry point for ``pulumi up`` in this folder: the IR path comes from stack config."""

from program import program

program()
