"""Verify: collect facts on nodes and compare them with the compiled fleet."""
