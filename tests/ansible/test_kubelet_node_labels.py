"""The kubelet_node_labels role, run by ansible-playbook on this machine over the rendered
inventory (one Kubernetes node, local connection, the environment file in a temporary
directory): kubelet gets exactly the labels the Pulumi stack patches, as ``--node-labels``
in KUBELET_EXTRA_ARGS, and the site's own kubelet arguments are kept."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from fleetspec.render.ansible import render_ansible
from fleetspec.render.kubelet import kubelet_may_set, registration_labels
from fleetspec.render.kubernetes import kubernetes_resources
from fleetspec.render.writer import write_tree
from tests.conftest import ROOT
from tests.kubernetes import fleets

PLAY = """\
- hosts: k8s_node
  gather_facts: false
  roles:
    - kubelet_node_labels
"""
HOST = "b200-01"


def run(tmp_path: Path, env_file: Path) -> subprocess.CompletedProcess[str]:
    playbook = shutil.which("ansible-playbook")
    assert playbook, "ansible-playbook is required (pip install ansible-core)"
    if not (tmp_path / "out/ansible/inventory.yml").exists():
        write_tree(render_ansible(fleets.museum()), tmp_path / "out")
    (tmp_path / "play.yml").write_text(PLAY)
    env = {"ANSIBLE_ROLES_PATH": str(ROOT / "playbooks/roles"), "ANSIBLE_HOME": str(tmp_path / ".ansible"),
           "ANSIBLE_LOCALHOST_WARNING": "false", "PATH": "/usr/bin:/bin:" + str(Path(playbook).parent)}
    return subprocess.run([playbook, "-i", str(tmp_path / "out/ansible/inventory.yml"), str(tmp_path / "play.yml"),
                           "--limit", HOST, "-e", "ansible_connection=local",
                           "-e", f"ansible_python_interpreter={sys.executable}",
                           "-e", f"fleetspec_kubelet_env_file={env_file}"],
                          capture_output=True, text=True, env=env, timeout=180)


def node_labels_arg(env_text: str) -> tuple[list[str], dict[str, str]]:
    """KUBELET_EXTRA_ARGS as kubelet gets it (the unit's ExecStart splits $KUBELET_EXTRA_ARGS
    on whitespace): (the other arguments, the --node-labels map)."""
    line = [x for x in env_text.splitlines() if x.startswith("KUBELET_EXTRA_ARGS=")][-1]
    args = shlex.split(line.split("=", 1)[1])
    labels = [a for a in args if a.startswith("--node-labels=")]
    assert len(labels) == 1, args
    pairs = labels[0].split("=", 1)[1].split(",")
    return [a for a in args if a not in labels], dict(p.split("=", 1) for p in pairs)


def stack_labels(host: str) -> dict[str, str]:
    return next(dict(n.labels) for n in kubernetes_resources(fleets.museum()).node_labels if n.hostname == host)


def test_a_new_node_registers_with_the_stacks_labels_and_a_rerun_changes_nothing(tmp_path: Path) -> None:
    env_file = tmp_path / "default-kubelet"
    done = run(tmp_path, env_file)
    assert done.returncode == 0, done.stdout[-3000:]
    others, labels = node_labels_arg(env_file.read_text())
    assert others == [] and labels == stack_labels(HOST)
    again = run(tmp_path, env_file)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]


def test_the_sites_kubelet_arguments_are_kept_and_a_stale_label_list_replaced(tmp_path: Path) -> None:
    env_file = tmp_path / "default-kubelet"
    env_file.write_text('# site\nKUBELET_EXTRA_ARGS="--node-ip=10.0.0.5 --node-labels=old=1 --max-pods=64"\nX=1\n')
    done = run(tmp_path, env_file)
    assert done.returncode == 0, done.stdout[-3000:]
    text = env_file.read_text()
    assert text.startswith("# site\n") and text.endswith("X=1\n")
    others, labels = node_labels_arg(text)
    assert others == ["--node-ip=10.0.0.5", "--max-pods=64"] and labels == stack_labels(HOST)


def test_every_label_fleetspec_sets_is_one_a_kubelet_may_set_under_node_restriction() -> None:
    for fleet in (fleets.museum(), fleets.slinky(fleets.museum()), fleets.volcano(fleets.museum()),
                  fleets.dra_gpus(fleets.museum())):
        layer = kubernetes_resources(fleet)
        assert all(kubelet_may_set(k) for n in layer.node_labels for k in n.labels)
        assert set(registration_labels(fleet)) == {n.hostname for n in layer.node_labels}


def test_node_restriction_keeps_the_kubelet_off_reserved_namespaces() -> None:
    # k8s.io/kubelet/pkg/apis IsKubeletLabel and NodeRestriction's getForbiddenLabels.
    for key in ("node-restriction.kubernetes.io/pool", "a.node-restriction.kubernetes.io/x",
                "node-role.kubernetes.io/worker", "kubernetes.io/anything", "example.k8s.io/x"):
        assert not kubelet_may_set(key), key
    for key in ("kubernetes.io/hostname", "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone",
                "x.node.kubernetes.io/y", "kubelet.kubernetes.io/z", "fleetspec.io/stack", "nvidia.com/gpu.deploy.device-plugin",
                "volcano.sh/nodegroup-name", "nokubernetes.io/x"):
        assert kubelet_may_set(key), key


def test_site_yml_runs_the_role_on_kubernetes_nodes_only() -> None:
    plays = yaml.safe_load((ROOT / "playbooks/site.yml").read_text())
    (entry,) = [r for play in plays for r in play.get("roles", ()) if r["role"] == "kubelet_node_labels"]
    assert "'k8s_node' in group_names" in entry["when"]
