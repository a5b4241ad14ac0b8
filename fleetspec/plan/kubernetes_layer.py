"""What the plan says about the Kubernetes layer beyond the rendered objects: what the
cluster itself must provide (feature gates: fleetspec cannot apply them), and Pulumi's
own preview when the ``pulumi`` CLI can run here, or one line saying why it cannot."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fleetspec.plan.model import Plan


def kubernetes_notes(plan: Plan, state_dir: Path | None,
                     preview: Callable[[Path], dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """None when the fleet has no Kubernetes layer; else prerequisites and the preview.

    ``preview`` (state dir -> {"available", "summary"}) is injected for tests; by default
    Pulumi's Automation API runs only when the plan touches the Kubernetes layer."""
    from fleetspec.render.kubernetes import kubernetes_resources

    layer = kubernetes_resources(plan.fleet)
    if layer.empty:
        return None
    notes: dict[str, Any] = {
        "prerequisites": [
            {"id": p.id, "message": p.message, "components": list(p.components),
             "feature_gates": list(p.feature_gates)}
            for p in layer.prerequisites
        ],
    }
    touched = any(c.target.startswith(("kubernetes:", "helm:")) for c in plan.changes)
    if touched and state_dir is not None:
        notes["preview"] = (preview or _pulumi_preview(plan))(state_dir)
    return notes


def _pulumi_preview(plan: Plan) -> Callable[[Path], dict[str, Any]]:
    def run(state_dir: Path) -> dict[str, Any]:
        from fleetspec.apply.pulumi import PulumiOptions, preview, unavailable_reason

        options = PulumiOptions(state_dir=state_dir)
        reason = unavailable_reason(options)
        if reason is not None:
            return {"available": False, "summary": reason}
        result = preview(plan.fleet, options)
        return {"available": True, "ok": result.ok, "summary": result.summary, "changes": result.changes}

    return run
