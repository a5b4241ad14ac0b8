import dataclasses
import textwrap

import pytest

from fleetspec.pipeline import compile_file, compile_text
from tests.conftest import EXAMPLES

BASE = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: t}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}
  racks:
    - name: r1
      leaf: leaf-01
      nodes:
"""


def spec(groups: str, extra: str = "") -> str:
    return BASE + textwrap.indent(textwrap.dedent(groups), " " * 8) + textwrap.indent(textwrap.dedent(extra), "  ")


def rules_of(result):
    return [(f.rule, f.line) for f in result.located()]


def test_museum_partitions_by_owner_vendor_generation():
    fleet = compile_file(EXAMPLES / "museum.yaml").fleet
    parts = {p.name: p for p in fleet.partitions}
    assert sorted(parts) == ["amd-cdna3", "amd-cdna4", "debug", "nvidia-ampere", "nvidia-blackwell",
                             "nvidia-blackwell-arm64", "nvidia-hopper"]
    hopper = parts["nvidia-hopper"]
    assert hopper.scheduler == "slurm" and hopper.gpu_models == ("h100-sxm", "h200")
    assert hopper.gpus == 64 and hopper.default and hopper.max_time == "2-00:00:00"
    assert parts["nvidia-blackwell"].scheduler == "kubernetes" and parts["nvidia-blackwell"].gpus == 4 * 8
    # Grace (arm64) GB200 trays are not in one partition with x86 HGX B200s: other packages and images.
    assert parts["nvidia-blackwell-arm64"].gpu_models == ("gb200",) and parts["nvidia-blackwell-arm64"].gpus == 72
    assert parts["debug"].nodes == ("h100-001", "h100-002") and not parts["debug"].generated
    gb200 = fleet.node("gb200-r07-01")
    assert gb200.nvlink_domain == "r07" and gb200.gpu.gres_type == "gb200" and gb200.leaf == "leaf-02"
    amd = fleet.stack("cdna3-rocm7")
    assert amd.rccl == "2.26.6" and amd.resolved == ()
    assert fleet.stack("cdna4-rocm7").resolved == ("rccl",)  # bundled RCCL filled in from the catalog


def test_fleet_json_is_deterministic_and_immutable():
    a = compile_file(EXAMPLES / "museum.yaml").fleet
    b = compile_file(EXAMPLES / "museum.yaml").fleet
    assert a.to_json() == b.to_json()
    assert a == b
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.nodes[0].hostname = "x"  # type: ignore[misc]


def test_same_generation_under_two_owners_gets_distinct_names():
    result = compile_text(spec("""\
        - hosts: a-[1-2]
          gpu: {model: h100, count: 8}
          stack: hopper
          scheduler: slurm
        - hosts: b-[1-2]
          gpu: {model: h200, count: 8}
          stack: hopper
          scheduler: kubernetes
    """))
    assert result.valid, rules_of(result)
    names = {p.name: p.scheduler for p in result.fleet.partitions}
    assert names == {"nvidia-hopper": "slurm", "nvidia-hopper-k8s": "kubernetes"}


def test_unquoted_version_is_refused_with_advice():
    result = compile_text(spec("""\
        - hosts: a1
          gpu: {model: h100, count: 8}
          stack: hopper
          scheduler: slurm
    """).replace('cuda: "13.0.2"', "cuda: 12.10"), "f.yaml")
    [finding] = result.located()
    assert finding.rule == "schema" and finding.line == 7
    assert 'Quote this version: cuda: "12.10"' in finding.message


def test_unknown_gpu_suggests_a_model():
    result = compile_text(spec("""\
        - hosts: a1
          gpu: {model: h100-sxn, count: 8}
          stack: hopper
          scheduler: slurm
    """), "f.yaml")
    [finding] = result.located()
    assert finding.rule == "unknown-gpu-model" and finding.line == 13
    assert "Did you mean 'h100-sxm'" in finding.message


def test_gpu_model_accepts_smi_names_case_insensitively():
    result = compile_text(spec("""\
        - hosts: a1
          gpu: {model: NVIDIA H200, count: 8}
          stack: hopper
          scheduler: slurm
    """))
    assert result.valid and result.fleet.nodes[0].gpu.model == "h200"


def test_errors_keep_their_locations_and_compile_continues():
    result = compile_text(spec("""\
        - hosts: a-[3-1]
          gpu: {model: h100, count: 8}
          stack: hopper
          scheduler: slurm
        - hosts: b1
          gpu: {model: h100, count: 8}
          stack: nope
          scheduler: slurm
        - hosts: b1
          gpu: {model: h100, count: 8}
          stack: hopper
          scheduler: slurm
        - hosts: b1
          gpu: {model: h100, count: 8}
          stack: hopper
          scheduler: slurm
    """), "f.yaml")
    assert not result.valid
    assert rules_of(result) == [("bad-hostlist", 12), ("unknown-stack", 18), ("duplicate-host", 24)]


def test_partition_settings_for_a_missing_partition():
    result = compile_text(spec("""\
        - hosts: a1
          gpu: {model: h100, count: 8}
          stack: hopper
          scheduler: slurm
    """, """\
      slurm:
        version: "25.11.8"
        controllers: ctl-01
        partitions:
          nvidia-hoper: {max_time: "1:00:00"}
    """), "f.yaml")
    assert ("unknown-partition", 20) in rules_of(result)
    assert "Slurm partitions: nvidia-hopper" in result.located()[0].message


def test_extra_partition_with_kubernetes_nodes_is_double_ownership():
    result = compile_text(spec("""\
        - hosts: a1
          gpu: {model: h100, count: 8}
          stack: hopper
          scheduler: slurm
        - hosts: k1
          gpu: {model: h100, count: 8}
          stack: hopper
          scheduler: kubernetes
    """, """\
      slurm:
        version: "25.11.8"
        controllers: ctl-01
        partitions:
          everything: {nodes: "a1,k1"}
    """), "f.yaml")
    assert ("double-allocation-owner", 24) in rules_of(result)


def test_node_count_scales_and_hostlists_expand():
    result = compile_text(spec("""\
        - hosts: gpu-[0001-2048]
          gpu: {model: h100, count: 8}
          stack: hopper
          scheduler: slurm
    """))
    assert result.valid
    assert len(result.fleet.nodes) == 2048 and result.fleet.partitions[0].gpus == 16384


def test_package_mirror_must_be_https_or_file_and_signed(tmp_path):
    base = (EXAMPLES / "quickstart.yaml").read_text()

    def with_mirror(mirror: str):
        return compile_text(base.replace("  slurm:\n", f"  packages:\n    mirror: {mirror}\n  slurm:\n", 1), "f.yaml")

    plain_http = with_mirror('{uri: "http://mirror.local/gpu", key_url: "https://mirror.local/k.gpg"}')
    assert [f.rule for f in plain_http.located()] == ["schema"] and "https://" in plain_http.located()[0].message
    unsigned = with_mirror('{uri: "https://mirror.local/gpu"}')
    assert "key_url" in unsigned.located()[0].message and not unsigned.valid
    trusted_net = with_mirror('{uri: "https://mirror.local/gpu", trusted: true}')
    assert "only a file: repository" in trusted_net.located()[0].message
    good = with_mirror('{uri: "https://mirror.local/gpu", key_url: "https://mirror.local/k.gpg"}')
    assert good.valid and good.fleet.package_mirror.uri == "https://mirror.local/gpu"
    local = with_mirror('{uri: "file:/srv/repo", trusted: true}')
    assert local.valid
    # Only https:// and file: (an absolute path) reach the nodes' apt sources.
    for url in ("ftp://x/y", "file:relative", "https://", "https://mirror.local/gpu with space"):
        bad = with_mirror(f'{{uri: "{url}", key_url: "https://mirror.local/k.gpg"}}')
        assert not bad.valid and "https://" in bad.located()[0].message, url
    bad_key = with_mirror('{uri: "https://mirror.local/gpu", key_url: "http://mirror.local/k.gpg"}')
    assert not bad_key.valid and bad_key.located()[0].path.endswith("key_url")


def test_did_you_mean_stays_within_the_model_family():
    result = compile_text(spec("""\
        - hosts: a1
          gpu: {model: H100-SXM5-94GB, count: 8}
          stack: hopper
          scheduler: slurm
    """), "f.yaml")
    [finding] = result.located()
    assert "Did you mean 'h100" in finding.message and "a100" not in finding.message
