"""Layouts: facts about the compiled fleet that the rules, the site checks and the renderers
share (which nodes Slurm or Kubernetes owns, the topology form a Slurm version can express,
Slinky's NodeSets, chart defaults). They read only the IR; render builds on them and they
never import render (docs/architecture.md).
"""
