"""kubernetes.values: a site's Helm values, deep-merged over what fleetspec renders, in
the rendered helm/ tree and in what the Pulumi program declares (mock runtime), with the
paths fleetspec coordinates refused."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import yaml

from fleetspec.pipeline import compile_text
from fleetspec.render.kubernetes import render_kubernetes
from fleetspec.site.helm import KUEUE_CONFIG, OWNED, check_values
from tests.conftest import EXAMPLES
from tests.kubernetes.test_chart_values import _chart_defaults, unknown_paths
from tests.kubernetes.test_pulumi_program import run_program  # noqa: F401 - the mock-runtime fixture

MUSEUM = (EXAMPLES / "museum.yaml").read_text()
OVERLAY = """\
    values:
      gpu-operator:
        mig: {strategy: mixed}
        devicePlugin:
          config: {name: device-plugin-config, default: any}
        driver:
          repository: registry.example.org/nvidia
          upgradePolicy: {maxParallelUpgrades: 2}
      kueue:
        managerConfig:
          controllerManagerConfigYaml:
            fairSharing: {enable: true, preemptionStrategies: [LessThanOrEqualToFinalShare]}
      amd-gpu-operator:
        kmm: {enabled: true}
"""


def _museum(overlay: str = OVERLAY) -> str:
    """The museum example with ``overlay`` under its kubernetes section."""
    text, n = re.subn(r"(?m)^(  kubernetes:\n)", lambda m: m.group(1) + overlay, MUSEUM, count=1)
    assert n == 1
    return text


def _compiled(text: str):
    result = compile_text(text, "museum.yaml")
    assert result.valid, [f.message for f in result.located() if f.severity.name == "ERROR"]
    return result.fleet


def _values(files, release: str) -> dict:
    return yaml.safe_load(files[PurePosixPath(f"kubernetes/helm/{release}.values.yaml")])


def test_overlay_is_merged_into_the_rendered_values() -> None:
    plain = render_kubernetes(_compiled(MUSEUM))
    files = render_kubernetes(_compiled(_museum()))
    gpu = _values(files, "gpu-operator")
    assert gpu["mig"] == {"strategy": "mixed"}
    assert gpu["devicePlugin"] == {"config": {"name": "device-plugin-config", "default": "any"}}
    # Merged, not replaced: fleetspec's driver pin stays beside the site's registry.
    assert gpu["driver"] == {**_values(plain, "gpu-operator")["driver"],
                             "repository": "registry.example.org/nvidia",
                             "upgradePolicy": {"maxParallelUpgrades": 2}}
    assert gpu["nfd"] == {"enabled": True}
    config = yaml.safe_load(_values(files, "kueue")["managerConfig"]["controllerManagerConfigYaml"])
    assert config["fairSharing"] == {"enable": True, "preemptionStrategies": ["LessThanOrEqualToFinalShare"]}
    plain_config = yaml.safe_load(_values(plain, "kueue")["managerConfig"]["controllerManagerConfigYaml"])
    assert config["waitForPodsReady"] == plain_config["waitForPodsReady"]  # fleetspec's gang settings kept
    assert {k: v for k, v in config.items() if k != "fairSharing"} == plain_config
    # Everything the overlay writes is a key the real charts have (their values.yaml).
    for release in ("gpu-operator", "amd-gpu-operator", "kueue"):
        defaults = _chart_defaults(release)
        assert unknown_paths(_values(files, release), defaults, defaults) == [], release


def test_overlay_reaches_the_pulumi_program_through_fleet_json(run_program, tmp_path) -> None:
    ir = tmp_path / "fleet.json"
    ir.write_text(_compiled(_museum()).to_json())
    res = run_program(None, {"fleetspec:irPath": str(ir), "fleetspec:context": "museum-admin"})
    values = res["release/gpu-operator"].inputs["values"]
    assert values["mig"] == {"strategy": "mixed"}
    plain = _values(render_kubernetes(_compiled(MUSEUM)), "gpu-operator")["driver"]
    assert values["driver"] == {**plain, "repository": "registry.example.org/nvidia",
                                "upgradePolicy": {"maxParallelUpgrades": 2}}
    kueue = res["release/kueue"].inputs["values"]["managerConfig"]["controllerManagerConfigYaml"]
    assert yaml.safe_load(kueue)["fairSharing"]["enable"] is True


def test_owned_paths_and_unknown_releases_are_located_errors() -> None:
    bad = ("    values:\n"
           "      gpu-operator:\n"
           "        driver: {version: \"570.1\"}\n"
           "        nfd: {enabled: false}\n"
           "      amd-gpu-operator:\n"
           "        node-feature-discovery: null\n"
           "      kueue:\n"
           "        managerConfig:\n"
           "          controllerManagerConfigYaml:\n"
           "            waitForPodsReady: {enable: false}\n"
           "      volcanoo: {}\n")
    text = _museum(bad)
    errors = [f for f in compile_text(text, "museum.yaml").located() if f.severity.name == "ERROR"]
    by_line = {f.line: f.message for f in errors}
    lines = text.splitlines()
    assert len(errors) == 5, by_line
    assert "driver.version" in by_line[lines.index('        driver: {version: "570.1"}') + 1]
    assert "spec.stacks" in by_line[lines.index('        driver: {version: "570.1"}') + 1]
    assert "nfd.enabled" in by_line[lines.index("        nfd: {enabled: false}") + 1]
    assert "node-feature-discovery" in by_line[lines.index("        node-feature-discovery: null") + 1]
    assert "kubernetes.gang" in by_line[lines.index("            waitForPodsReady: {enable: false}") + 1]
    assert "no Helm release 'volcanoo'" in by_line[lines.index("      volcanoo: {}") + 1]


def _owned_errors(release: str, overlay: dict) -> list:
    findings: list = []
    check_values({release: overlay}, [release], ("spec", "kubernetes", "values"), findings)
    return findings


def test_chart_paths_that_change_auth_privilege_or_slurm_config_are_refused() -> None:
    """#27 item 3: controller.extraConf (a raw string that takes precedence over the
    extraConfMap fleetspec fills), the key refs, the prolog/epilog script maps,
    controller.external and extraObjects of the Slinky chart; Kueue's tenant gating."""
    hostile = {
        ("controller", "extraConf"): "AuthType=auth/none SlurmUser=root",
        ("slurmKey", "secretRef"): {"name": "mine", "key": "slurm.key"},
        ("jwtKey", "create"): False,
        ("prologScripts",): {"00.sh": "#!/bin/sh\nid"},
        ("epilogSlurmctldScripts",): {"00.sh": "#!/bin/sh\nid"},
        ("controller", "external"): True,
        ("extraObjects",): [{"apiVersion": "v1", "kind": "Pod"}],
        ("nodesetDefaults", "extraConf"): "Sockets=1 CoresPerSocket=1",
        ("loginsetDefaults", "rootSshAuthorizedKeys"): "ssh-ed25519 AAAA attacker",
    }
    for path, value in hostile.items():
        overlay: dict = value  # type: ignore[assignment]
        for key in reversed(path):
            overlay = {key: overlay}
        errors = _owned_errors("slurm", overlay)
        owned = next(p for p in OWNED["slurm"] if path[:len(p)] == p)
        assert len(errors) == 1, path
        assert f"value {'.'.join(owned)} is fleetspec's" in errors[0].message, errors[0].message
        assert errors[0].path == ("spec", "kubernetes", "values", "slurm", *owned)
    # What a site may tune stays open: resources, images from its mirror, metadata.
    assert _owned_errors("slurm", {"controller": {"slurmctld": {"resources": {"limits": {"cpu": 4}}}},
                                   "nodesetDefaults": {"slurmd": {"image": {"repository": "mirror/slurmd"}}}}) == []
    text = _museum("    values:\n"
                   "      kueue:\n"
                   "        managerConfig:\n"
                   "          controllerManagerConfigYaml:\n"
                   "            manageJobsWithoutQueueName: false\n"
                   "            managedJobsNamespaceSelector: {matchLabels: {none: none}}\n")
    errors = [f for f in compile_text(text, "museum.yaml").located() if f.severity.name == "ERROR"]
    lines = text.splitlines()
    by_line = {f.line: f.message for f in errors}
    assert len(errors) == 2, by_line
    assert "kubernetes.tenants" in by_line[lines.index("            manageJobsWithoutQueueName: false") + 1]
    assert "managedJobsNamespaceSelector" in by_line[
        lines.index("            managedJobsNamespaceSelector: {matchLabels: {none: none}}") + 1]


def test_every_owned_chart_path_is_a_path_of_the_pinned_chart() -> None:
    """An owned path the chart does not have guards nothing: each one is in the chart's
    values.yaml at the pinned tag (Kueue's are keys of its Configuration)."""
    for release in ("slurm", "kueue", "volcano", "gpu-operator", "amd-gpu-operator"):
        defaults = _chart_defaults(release)
        for path in OWNED[release]:
            if release == "kueue":
                assert path[:2] == KUEUE_CONFIG and len(path) > 2, path
                continue
            node = defaults
            for key in path:
                assert isinstance(node, dict) and key in node, (release, path)
                node = node[key]


def test_a_literal_secret_in_chart_values_is_refused_and_never_echoed() -> None:
    """#27 item 8: a chart value named like a secret that holds a literal would be written to
    the rendered values, the state and saved plans; one that names a Kubernetes Secret is fine."""
    overlay = {"driver": {"licensingConfig": {"secretName": "licensing-config"},
                          "repoConfig": {"token": "s3cr3t-t0ken"}},
               "imagePullSecrets": ["ngc-pull"],
               "validator": {"env": [{"name": "X", "password": "hunter2"}]},
               "dcgmExporter": {"existingSecret": "exporter", "enabled": True}}
    findings = _owned_errors("gpu-operator", overlay)
    messages = [f.message for f in findings]
    assert len(findings) == 2, messages
    assert any("driver.repoConfig.token reads as a secret" in m for m in messages)
    assert any("validator.env.0.password reads as a secret" in m for m in messages)
    assert not any("s3cr3t" in m or "hunter2" in m for m in messages)
    assert {f.path[-1] for f in findings} == {"token", "password"}
    # in a whole spec: located at the key, and nothing is rendered
    text = _museum("    values:\n      gpu-operator:\n        driver:\n          repoConfig: {token: s3cr3t-t0ken}\n")
    result = compile_text(text, "museum.yaml")
    errors = [f for f in result.located() if f.severity.name == "ERROR"]
    assert len(errors) == 1 and errors[0].line == text.splitlines().index(
        "          repoConfig: {token: s3cr3t-t0ken}") + 1, [(f.line, f.message) for f in errors]
    assert "s3cr3t" not in errors[0].message
