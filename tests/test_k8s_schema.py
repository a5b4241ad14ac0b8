"""tests/k8s_schema.py against the real upstream CRDs in tests/data/crds and kubernetes-validate.

Each valid object below uses field names read from the CRD files (see crds/SOURCES.md for
the upstream tags); each broken one must fail with a message that names the field.
"""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import require_shared
from tests.k8s_schema import (
    CrdIndex,
    CrdLoadError,
    builtin_schema_version,
    check_object,
    validate_manifests,
    validate_object,
)

K8S = "1.33"

VALID_MANIFESTS = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h200}
spec:
  nodeLabels: {nvidia.com/gpu.product: NVIDIA-H200}
  nodeTaints:
  - {key: nvidia.com/gpu, value: present, effect: NoSchedule, timeAdded: 2026-01-02T15:04:05Z}
  tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  topologyName: gpu-topology
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: gpu-cluster}
spec:
  cohortName: research
  namespaceSelector: {}
  queueingStrategy: BestEffortFIFO
  preemption: {reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h200
      resources:
      - {name: cpu, nominalQuota: 224}
      - {name: memory, nominalQuota: 2048Gi}
      - {name: nvidia.com/gpu, nominalQuota: "8", borrowingLimit: 0}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: team-a}
spec: {clusterQueue: gpu-cluster}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: research}
spec:
  fairSharing: {weight: "2"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Topology
metadata: {name: gpu-topology}
spec:
  levels:
  - nodeLabel: topology.kubernetes.io/zone
  - nodeLabel: kubernetes.io/hostname
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: training}
spec:
  weight: 4
  reclaimable: true
  capability: {cpu: "448", memory: 4Ti, nvidia.com/gpu: 16}
---
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: rack-1}
spec:
  tier: 1
  members:
  - type: Node
    selector:
      exactMatch: {name: gpu-node-01}
---
apiVersion: nvidia.com/v1alpha1
kind: NVIDIADriver
metadata: {name: h200-driver}
spec:
  driverType: gpu
  version: "580.95.05"
  image: driver
  repository: nvcr.io/nvidia
  kernelModuleType: open
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-H200}
---
apiVersion: amd.com/v1alpha1
kind: DeviceConfig
metadata: {name: mi300x, namespace: kube-amd-gpu}
spec:
  driver: {enable: true, version: "6.4.1"}
  devicePlugin: {enableNodeLabeller: true}
  metricsExporter: {enable: true, port: 5000}
  selector: {feature.node.kubernetes.io/amd-gpu: "true"}
---
apiVersion: slinky.slurm.net/v1beta1
kind: NodeSet
metadata: {name: h200, namespace: slurm}
spec:
  controllerRef: {name: slurm}
  replicas: 2
  partition: {enabled: true}
  slurmd:
    image: ghcr.io/slinkyproject/slurmd:25.05-ubuntu24.04
    resources: {limits: {nvidia.com/gpu: 8}}
  template:
    metadata:
      labels: {app.kubernetes.io/name: slurmd}
    spec:
      nodeSelector: {nvidia.com/gpu.product: NVIDIA-H200}
  volumeClaimTemplates: null
---
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  labels: {kueue.x-k8s.io/managed: "true"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: fleet-facts, namespace: kueue-system}
data: {gpus: "8"}
---
apiVersion: v1
kind: Node
metadata:
  name: gpu-node-01.lab
  labels: {nvidia.com/gpu.product: NVIDIA-H200, fleetspec.io/pool: h200}
"""


@pytest.fixture(scope="module")
def crd_dir() -> Path:
    return require_shared("crds")


@pytest.fixture(scope="module")
def index(crd_dir: Path) -> CrdIndex:
    return CrdIndex.load(crd_dir)


@pytest.fixture(scope="module")
def valid() -> dict[str, dict[str, Any]]:
    return {obj["kind"]: obj for obj in yaml.safe_load_all(VALID_MANIFESTS)}


def broken(valid: dict[str, dict[str, Any]], kind: str) -> dict[str, Any]:
    return copy.deepcopy(valid[kind])


@pytest.mark.parametrize(
    "kind",
    [
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "Cohort",
        "Topology",
        "Queue",
        "HyperNode",
        "NVIDIADriver",
        "DeviceConfig",
        "NodeSet",
        "Namespace",
        "ConfigMap",
        "Node",
    ],
)
def test_valid_objects_pass(index: CrdIndex, valid: dict, kind: str) -> None:
    assert validate_object(valid[kind], index, K8S) == []


def test_index_holds_served_versions_and_skips_non_crd_yaml(index: CrdIndex) -> None:
    # values.yaml files sit beside the CRDs and must be ignored; both Kueue versions are served.
    assert index.get("kueue.x-k8s.io/v1beta1", "ClusterQueue") is not None
    assert index.get("kueue.x-k8s.io/v1beta2", "ClusterQueue").scope == "Cluster"
    assert index.get("slinky.slurm.net/v1beta1", "NodeSet").scope == "Namespaced"
    assert index.get("ray.io/v1alpha1", "RayCluster") is not None
    assert index.served_versions("kueue.x-k8s.io", "Cohort") == ["v1beta1", "v1beta2"]


def test_the_right_schema_judges_each_object(index: CrdIndex, valid: dict) -> None:
    assert (
        "nvidia.com_nvidiadrivers.yaml"
        in check_object(valid["NVIDIADriver"], index, K8S).schema_source
    )
    assert check_object(valid["ConfigMap"], index, K8S).schema_source.startswith(
        "kubernetes-validate"
    )


def test_unknown_field_under_spec(index: CrdIndex, valid: dict) -> None:
    cq = broken(valid, "ClusterQueue")
    cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuotas"] = 8
    assert validate_object(cq, index, K8S) == [
        "spec.resourceGroups[0].flavors[0].resources[0].nominalQuotas: unknown field"
    ]


def test_field_of_an_older_api_version_is_unknown_in_the_newer(
    index: CrdIndex, valid: dict
) -> None:
    # v1beta1 ClusterQueue said `cohort`; v1beta2 renamed it to `cohortName`.
    cq = broken(valid, "ClusterQueue")
    cq["spec"]["cohort"] = cq["spec"].pop("cohortName")
    assert validate_object(cq, index, K8S) == ["spec.cohort: unknown field"]
    cq["apiVersion"] = "kueue.x-k8s.io/v1beta1"
    assert "spec.cohort: unknown field" not in validate_object(cq, index, K8S)


def test_string_where_an_integer_is_required(index: CrdIndex, valid: dict) -> None:
    queue = broken(valid, "Queue")
    queue["spec"]["weight"] = "4"
    assert validate_object(queue, index, K8S) == [
        'spec.weight: Invalid value: "4": must be of type integer'
    ]


def test_missing_required_field(index: CrdIndex, valid: dict) -> None:
    cq = broken(valid, "ClusterQueue")
    del cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"]
    assert validate_object(cq, index, K8S) == [
        "spec.resourceGroups[0].flavors[0].resources[2].nominalQuota: Required value"
    ]


def test_required_field_with_a_default_may_be_omitted(index: CrdIndex, valid: dict) -> None:
    # NVIDIADriver requires `default` and `image`, but both have schema defaults the server applies.
    driver = broken(valid, "NVIDIADriver")
    del driver["spec"]["image"]
    assert validate_object(driver, index, K8S) == []
    topology = broken(valid, "Topology")
    del topology["spec"]["levels"]
    assert validate_object(topology, index, K8S) == ["spec.levels: Required value"]


def test_bad_enum_value(index: CrdIndex, valid: dict) -> None:
    driver = broken(valid, "NVIDIADriver")
    driver["spec"]["driverType"] = "cuda"
    (error,) = validate_object(driver, index, K8S)
    assert error.startswith('spec.driverType: Unsupported value: "cuda"')
    assert '"gpu", "vgpu", "vgpu-host-manager"' in error


def test_cluster_scoped_kind_with_a_namespace(index: CrdIndex, valid: dict) -> None:
    flavor = broken(valid, "ResourceFlavor")
    flavor["metadata"]["namespace"] = "kueue-system"
    assert validate_object(flavor, index, K8S) == [
        "metadata.namespace: Forbidden: ResourceFlavor is cluster-scoped and takes no namespace"
    ]


def test_namespaced_kind_without_a_namespace(index: CrdIndex, valid: dict) -> None:
    local_queue = broken(valid, "LocalQueue")
    del local_queue["metadata"]["namespace"]
    (error,) = validate_object(local_queue, index, K8S)
    assert error.startswith("metadata.namespace: Required value: LocalQueue is namespaced")


@pytest.mark.parametrize("quantity", [8, "8", "64Gi", "500m", "1.5", 0, 8.0])
def test_quantities_accepted_where_int_or_string(
    index: CrdIndex, valid: dict, quantity: Any
) -> None:
    queue = broken(valid, "Queue")
    queue["spec"]["capability"]["nvidia.com/gpu"] = quantity
    assert validate_object(queue, index, K8S) == []


@pytest.mark.parametrize(
    ("quantity", "problem"),
    [
        ("eight", 'Invalid value: "eight": must be a quantity such as 8, 500m or 64Gi'),
        (1.5, "Invalid value: 1.5: must be an integer or a string"),
        (True, "Invalid value: true: must be an integer or a string"),
    ],
)
def test_bad_quantities_rejected(index: CrdIndex, valid: dict, quantity: Any, problem: str) -> None:
    queue = broken(valid, "Queue")
    queue["spec"]["capability"]["nvidia.com/gpu"] = quantity
    assert validate_object(queue, index, K8S) == [f"spec.capability[nvidia.com/gpu]: {problem}"]


def test_numeric_bounds_and_int32_range(index: CrdIndex, valid: dict) -> None:
    queue = broken(valid, "Queue")
    queue["spec"]["weight"] = 0  # minimum 1
    queue["spec"]["priority"] = 2**31  # format int32
    assert validate_object(queue, index, K8S) == [
        "spec.weight: Invalid value: 0: must be greater than or equal to 1",
        "spec.priority: Invalid value: 2147483648: out of range for int32",
    ]


def test_item_counts_length_and_pattern(index: CrdIndex, valid: dict) -> None:
    topology = broken(valid, "Topology")
    topology["spec"]["levels"] = [{"nodeLabel": f"example.com/level-{i}"} for i in range(17)]
    assert validate_object(topology, index, K8S) == [
        "spec.levels: Too many: 17: must have at most 16 items"
    ]
    topology["spec"]["levels"] = []
    assert validate_object(topology, index, K8S) == [
        "spec.levels: Invalid value: 0 items: must have at least 1 items"
    ]
    cq = broken(valid, "ClusterQueue")
    cq["spec"]["cohortName"] = "Research_Cohort"
    (error,) = validate_object(cq, index, K8S)
    assert error.startswith(
        'spec.cohortName: Invalid value: "Research_Cohort": must be the pattern'
    )
    cq["spec"]["cohortName"] = "a" * 254
    assert "spec.cohortName: Too long: may not be more than 253 characters" in validate_object(
        cq, index, K8S
    )


def test_list_map_keys_must_be_unique(index: CrdIndex, valid: dict) -> None:
    cq = broken(valid, "ClusterQueue")
    flavors = cq["spec"]["resourceGroups"][0]["flavors"]
    flavors.append(copy.deepcopy(flavors[0]))
    assert validate_object(cq, index, K8S) == [
        'spec.resourceGroups[0].flavors[1]: Duplicate value: {"name": "h200"}'
    ]


def test_preserve_unknown_fields_and_nullable(index: CrdIndex, valid: dict) -> None:
    nodeset = broken(valid, "NodeSet")
    nodeset["spec"]["slurmd"]["anything"] = {"goes": ["here", 1, None]}
    assert validate_object(nodeset, index, K8S) == []
    nodeset["spec"]["replicas"] = None  # not nullable
    nodeset["spec"]["partition"]["enabeld"] = True  # a typo next to the preserved subtree
    assert validate_object(nodeset, index, K8S) == [
        "spec.replicas: Invalid value: null: must not be null here",
        "spec.partition.enabeld: unknown field",
    ]


def test_metadata_names_and_labels(index: CrdIndex, valid: dict) -> None:
    flavor = broken(valid, "ResourceFlavor")
    flavor["metadata"] = {
        "name": "H200_Flavor",
        "labels": {"fleetspec.io/pool": "h200 nodes"},
        "lables": {},
    }
    errors = validate_object(flavor, index, K8S)
    assert "metadata.lables: unknown field" in errors
    assert any(
        e.startswith('metadata.name: Invalid value: "H200_Flavor": must be a DNS-1123 subdomain')
        for e in errors
    )
    assert any(
        e.startswith('metadata.labels[fleetspec.io/pool]: Invalid value: "h200 nodes"')
        for e in errors
    )
    del flavor["metadata"]
    assert "metadata: Required value" in validate_object(flavor, index, K8S)


def test_unknown_kind_or_version_has_no_schema(index: CrdIndex, valid: dict) -> None:
    cq = broken(valid, "ClusterQueue")
    cq["apiVersion"] = "kueue.x-k8s.io/v1alpha1"
    assert validate_object(cq, index, K8S) == [
        "<root>: no schema for kueue.x-k8s.io/v1alpha1 ClusterQueue: the CRD serves v1beta1, v1beta2"
    ]
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    (error,) = validate_object(widget, index, K8S)
    assert error.startswith("<root>: no schema for example.com/v1 Widget")
    assert validate_object({"kind": "ConfigMap"}, index, K8S) == [
        "<root>: apiVersion and kind must be non-empty strings"
    ]


def test_cel_rules_are_counted_not_evaluated(index: CrdIndex, valid: dict) -> None:
    assert index.get("kueue.x-k8s.io/v1beta2", "ClusterQueue").cel_rules > 0
    assert index.cel_rule_count >= 50
    check = check_object(valid["ResourceFlavor"], index, K8S)
    assert check.errors == () and check.skipped_cel_rules > 0


def test_builtin_configmap_with_int_value_fails(index: CrdIndex, valid: dict) -> None:
    config_map = broken(valid, "ConfigMap")
    config_map["data"]["gpus"] = 8
    (error,) = validate_object(config_map, index, K8S)
    assert error.startswith("data.gpus: 8 is not of type 'string'")


def test_builtin_unknown_field_scope_and_name_rules(index: CrdIndex, valid: dict) -> None:
    config_map = broken(valid, "ConfigMap")
    config_map["date"] = config_map.pop("data")
    assert validate_object(config_map, index, K8S) == [
        "<root>: Additional properties are not allowed ('date' was unexpected)"
    ]
    namespace = broken(valid, "Namespace")
    namespace["metadata"].update(name="team.a", namespace="default")
    errors = validate_object(namespace, index, K8S)
    assert any(
        e.startswith('metadata.name: Invalid value: "team.a": must be a DNS-1123 label')
        for e in errors
    )
    assert (
        "metadata.namespace: Forbidden: Namespace is cluster-scoped and takes no namespace"
        in errors
    )
    node = broken(valid, "Node")
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = 8
    assert validate_object(node, index, K8S) == [
        "metadata.labels.nvidia.com/gpu.count: 8 is not of type 'string', 'null'"
    ]


def test_kubernetes_version_fallback_is_reported(index: CrdIndex, valid: dict) -> None:
    newest, note = builtin_schema_version("1.99")
    assert note and "ships schemas up to" in note and newest in note
    assert builtin_schema_version("v1.30.4") == ("1.30.0", None)
    check = check_object(valid["ConfigMap"], index, "1.99")
    assert check.errors == () and check.notes == (note,)
    with pytest.raises(ValueError, match="not a Kubernetes version"):
        builtin_schema_version("latest")


def test_validate_manifests_keys_errors_by_position(crd_dir: Path, valid: dict) -> None:
    objs = list(valid.values())
    assert validate_manifests(objs, crd_dir, K8S) == {}
    bad = broken(valid, "Cohort")
    bad["spec"]["parent"] = "root"
    assert validate_manifests([*objs, bad], crd_dir, K8S) == {
        len(objs): ["spec.parent: unknown field"]
    }


# A small CRD of our own for schema features the upstream CRDs do not use.
SYNTHETIC_CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Gadget, plural: gadgets}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: self.size != 'huge'
            properties:
              size: {type: string, format: int-or-string}
              created: {type: string, format: date-time}
              code: {type: string, pattern: '^(?i)[a-z]+$'}
              ratio: {type: number, minimum: 0, maximum: 1, exclusiveMaximum: true}
              tags:
                type: array
                x-kubernetes-list-type: set
                items: {type: string}
              template:
                type: object
                x-kubernetes-embedded-resource: true
                x-kubernetes-preserve-unknown-fields: true
  - name: v0
    served: false
    storage: false
    schema:
      openAPIV3Schema: {type: object}
"""


@pytest.fixture
def synthetic_index(tmp_path: Path) -> CrdIndex:
    (tmp_path / "gadgets.yaml").write_text(textwrap.dedent(SYNTHETIC_CRD))
    return CrdIndex.load(tmp_path)


def gadget(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Gadget",
        "metadata": {"name": "g", "namespace": "n"},
        "spec": spec,
    }


def test_synthetic_schema_features_accept(synthetic_index: CrdIndex) -> None:
    ok = gadget(
        size=3,
        created="2026-01-02T15:04:05Z",
        code="ABC",
        ratio=0.5,
        tags=["a", "b"],
        template={
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"labels": {"a": "b"}},
            "spec": {"x": 1},
        },
    )
    check = check_object(ok, synthetic_index, K8S)
    assert check.errors == () and check.skipped_cel_rules == 1
    assert validate_object(gadget(size="3"), synthetic_index, K8S) == []
    assert synthetic_index.get("example.com/v0", "Gadget") is None  # not served


def test_synthetic_schema_features_reject(synthetic_index: CrdIndex) -> None:
    bad = gadget(
        size=[3],
        created="yesterday",
        code="abc1",
        ratio=1,
        tags=["a", "a"],
        template={"kind": "Pod", "metadata": {"labels": {"a": 1}}},
    )
    assert validate_object(bad, synthetic_index, K8S) == [
        "spec.size: Invalid value: [3]: must be an integer or a string",
        'spec.created: Invalid value: "yesterday": must be an RFC 3339 date-time (e.g. 2026-01-02T15:04:05Z)',
        'spec.code: Invalid value: "abc1": must be the pattern ^(?i)[a-z]+$',
        "spec.ratio: Invalid value: 1: must be less than 1",
        'spec.tags[1]: Duplicate value: "a"',
        "spec.template.apiVersion: Required value: an embedded resource needs apiVersion",
        "spec.template.metadata.labels[a]: Invalid value: 1: must be a string",
    ]


def test_loading_rejects_conflicting_or_legacy_crds(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(textwrap.dedent(SYNTHETIC_CRD))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.yml").write_text(textwrap.dedent(SYNTHETIC_CRD))
    with pytest.raises(CrdLoadError, match="defined twice"):
        CrdIndex.load(tmp_path)
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "old.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1beta1\nkind: CustomResourceDefinition\n"
    )
    with pytest.raises(CrdLoadError, match="only apiextensions.k8s.io/v1"):
        CrdIndex.load(legacy)
    with pytest.raises(CrdLoadError, match="does not exist"):
        CrdIndex.load(tmp_path / "missing")
