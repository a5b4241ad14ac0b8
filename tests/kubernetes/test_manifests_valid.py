"""Every rendered object validates against the real upstream CRD schemas (custom kinds)
or kubernetes-validate (built-in kinds), for museum and its variants; the check can fail."""

from __future__ import annotations

import copy
import subprocess

import pytest
import yaml

from fleetspec.compile.ir import Fleet
from fleetspec.render.kubernetes import kubernetes_resources, render_kubernetes
from tests.k8s_schema import CrdIndex, validate_object


def _rendered_objects(fleet: Fleet) -> list[dict]:
    """The objects as a user's kubectl would read them: parsed back from the files."""
    objs = []
    for path, text in render_kubernetes(fleet).items():
        if path.parts[1] == "manifests":
            objs.extend(d for d in yaml.safe_load_all(text) if d is not None)
    return objs


def test_every_rendered_object_is_valid(variant, crd_index: CrdIndex) -> None:
    name, fleet = variant
    objs = _rendered_objects(fleet)
    assert objs, name
    assert len(objs) == len(kubernetes_resources(fleet).manifests)
    for obj in objs:
        errors = validate_object(obj, crd_index, fleet.kubernetes.version)
        assert errors == [], f"{name}: {obj['kind']}/{obj['metadata']['name']}: {errors}"


BUILTIN_GROUPS = frozenset({"admissionregistration.k8s.io", "resource.k8s.io"})


def test_custom_resources_are_checked_against_a_crd(crd_index: CrdIndex) -> None:
    """Every custom kind we render has a CRD in tests/data/crds (none passes unchecked)."""
    from . import fleets

    kinds = set()
    for make in (fleets.museum, lambda: fleets.volcano(fleets.museum()),
                 lambda: fleets.two_nvidia_stacks(fleets.museum()), lambda: fleets.rdma_sriov(fleets.museum())):
        for obj in _rendered_objects(make()):
            # Built-in API groups (admission policies, DRA) are checked by kubernetes-validate.
            if "/" in obj["apiVersion"] and obj["apiVersion"].split("/")[0] not in BUILTIN_GROUPS:
                assert crd_index.get(obj["apiVersion"], obj["kind"]) is not None, obj["kind"]
                kinds.add(obj["kind"])
    assert kinds >= {"ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort", "Topology",
                     "DeviceConfig", "NVIDIADriver", "Queue", "HyperNode", "NicClusterPolicy",
                     "HostDeviceNetwork"}


@pytest.mark.parametrize(
    ("kind", "breakage", "expected"),
    [
        ("ClusterQueue", lambda o: o["spec"].update(queueingStrategy="Fastest"),
         "queueingStrategy"),
        ("ResourceFlavor", lambda o: o["spec"].update(nodeLabel={"a": "b"}), "nodeLabel"),
        ("LocalQueue", lambda o: o["metadata"].pop("namespace"), "namespace"),
        ("DeviceConfig", lambda o: o["spec"]["driver"].update(enable="yes"), "enable"),
        ("Namespace", lambda o: o["metadata"].update(name="Not_A_Label"), "name"),
        ("ClusterQueue", lambda o: o["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
         .update(nominalQuota="lots"), "nominalQuota"),
    ],
)
def test_a_broken_object_fails_the_check(kind, breakage, expected, crd_index) -> None:
    from . import fleets

    fleet = fleets.museum()
    obj = copy.deepcopy(next(o for o in _rendered_objects(fleet) if o["kind"] == kind))
    assert validate_object(obj, crd_index, "1.36") == []
    breakage(obj)
    errors = validate_object(obj, crd_index, "1.36")
    assert errors and any(expected in e for e in errors), errors


def test_volcano_broken_queue_fails(crd_index) -> None:
    from . import fleets

    queue = next(o for o in _rendered_objects(fleets.volcano(fleets.museum()))
                 if o["kind"] == "Queue")
    queue["spec"]["weight"] = 0  # minimum 1
    assert validate_object(queue, crd_index, "1.36")


def test_kueue_configuration_is_v1beta2_with_gang() -> None:
    """No CRD exists for the Kueue Configuration (a ConfigMap payload): check the fields
    the v1beta2 API requires for gang admission, as documented at v0.19.2."""
    from . import fleets

    layer = kubernetes_resources(fleets.museum())
    kueue = next(r for r in layer.releases if r.name == "kueue")
    config = yaml.safe_load(kueue.values["managerConfig"]["controllerManagerConfigYaml"])
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["kind"] == "Configuration"
    wfpr = config["waitForPodsReady"]
    assert "enable" not in wfpr  # removed in v1beta2
    # Kueue's own default, and written out: it is cluster-wide, model servers included.
    assert wfpr["timeout"] == "30m"
    assert wfpr["recoveryTimeout"] == "30m"  # v1beta2: defaults to timeout; shown, not implied
    # true would admit one workload at a time cluster-wide until its pods are ready.
    assert wfpr["blockAdmission"] is False
    assert wfpr["requeuingStrategy"]["timestamp"] in ("Eviction", "Creation")


def test_kueue_pods_ready_sized_for_serving() -> None:
    """waitForPodsReady has no per-namespace scope: a model server (pod/deployment
    integrations) slower than the timeout is evicted and requeued forever. The spec sizes
    both timeouts; ``recovery_timeout: 0s`` stops evicting a workload that was once ready;
    a timeout below Kueue's own default is a warning naming serving."""
    import dataclasses

    from fleetspec.rules.scheduling import check_pods_ready_timeout

    from . import fleets

    museum = fleets.museum()

    def config(**gang):
        k8s = dataclasses.replace(museum.kubernetes, **gang)
        fleet = dataclasses.replace(museum, kubernetes=k8s)
        kueue = next(r for r in kubernetes_resources(fleet).releases if r.name == "kueue")
        text = kueue.values["managerConfig"]["controllerManagerConfigYaml"]
        return yaml.safe_load(text)["waitForPodsReady"], list(
            check_pods_ready_timeout(fleet, None))  # type: ignore[arg-type]

    wfpr, findings = config(gang_timeout="45m", gang_recovery_timeout="0s")
    assert (wfpr["timeout"], wfpr["recoveryTimeout"]) == ("45m", "0s") and not findings
    assert not config()[1]  # the defaults: Kueue's 30m
    for gang in ({"gang_timeout": "10m"}, {"gang_recovery_timeout": "5m"}):
        (finding,) = config(**gang)[1]
        assert finding.rule == "kueue-pods-ready-timeout"
        assert "model servers" in finding.message and "requeued forever" in finding.message


def test_kueue_gates_every_workload_in_tenant_namespaces_and_only_installed_kinds() -> None:
    """A GPU pod without a queue name in a tenant namespace must not run outside quota, and
    Kueue must not be told to manage kinds whose operators are not installed."""
    from . import fleets

    fleet = fleets.museum()
    config = yaml.safe_load(next(r for r in kubernetes_resources(fleet).releases if r.name == "kueue")
                            .values["managerConfig"]["controllerManagerConfigYaml"])
    assert config["manageJobsWithoutQueueName"] is True
    selector = config["managedJobsNamespaceSelector"]["matchExpressions"]
    assert selector == [{"key": "kubernetes.io/metadata.name", "operator": "In",
                         "values": ["inference", "inference-canary", "research"]}]
    # Built-ins plus exactly the operators the stack installs (museum: KubeRay and JobSet).
    installed = {r.name for r in kubernetes_resources(fleet).releases}
    assert {"jobset", "kuberay-operator"} <= installed
    assert not installed & {"lws", "mpi-operator"}
    assert config["integrations"]["frameworks"] == [
        "batch/job", "pod", "deployment", "statefulset", "jobset.x-k8s.io/jobset",
        "ray.io/rayjob", "ray.io/raycluster", "ray.io/rayservice"]


def test_scripts_are_valid_shell(tmp_path) -> None:
    """The label and install scripts parse, and the label script runs every node through
    the client it is given (here ``echo``), stopping on the first failure."""
    from . import fleets

    files = render_kubernetes(fleets.museum())
    for rel in ("kubernetes/node-labels.sh", "kubernetes/helm/install.sh"):
        script = tmp_path / rel.replace("/", "_")
        script.write_text(files[next(p for p in files if str(p) == rel)])
        subprocess.run(["sh", "-n", str(script)], check=True)
    labels = tmp_path / "kubernetes_node-labels.sh"
    out = subprocess.run(["sh", str(labels)], env={"KUBECTL": "echo", "PATH": "/usr/bin:/bin"},
                         check=True, capture_output=True, text=True).stdout.splitlines()
    assert len(out) == 24  # 4 B200 + 18 GB200 + 2 MI355X; no Slurm node
    assert out[0].startswith("label node --overwrite b200-01 ")
    failing = subprocess.run(["sh", str(labels)], env={"KUBECTL": "false", "PATH": "/usr/bin:/bin"},
                             capture_output=True)
    assert failing.returncode != 0
