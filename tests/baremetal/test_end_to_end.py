"""Issue #32's end to end, on two virtual nodes: a rack of gpu-01 and its spare spare-01.

Real parts: sushy-emulator as each node's BMC (tests/baremetal/bmc_emulator.py), whose
power actions start and stop the node's QEMU (as libvirt domains are behind its libvirt
driver in Ironic's CI); the rendered dnsmasq.conf and iPXE scripts; the golden image built
from its rendered recipe (the stack's pinned packages and SchedMD's slurmd, here Debian's
build of the same release: fleetspec/lab/golden.py); Debian's slurmctld and munge on this
machine; Ansible over SSH for join and verify; an HTTP server as the ticket webhook. All of
it in a network namespace of the test's own (tests/baremetal/netboot.py): the provisioning
network (a bridge, a tap per node), and the loopback where the BMCs, the webhook and the
firmware image server listen.

The story, through the CLI an operator runs:

1. ``baremetal plan``: both nodes are off; the plan powers them on (boot once from the
   network), stages the spec's BIOS attribute and updates the BIOS firmware to the stack's pin;
2. ``baremetal apply --drain slurm --tftp``: writes each node's boot script by the MAC its
   BMC reports, holds both nodes drained in Slurm, updates and stages, sets PXE once and powers
   on: QEMU starts, iPXE chains the node's script, the kernel fetches the golden image;
   with ``--join``, then joins the nodes it powered on as ``baremetal join`` does: installs the
   fleet's munge key, starts munge and slurmd (tried again while a node is still booting),
   whose configuration comes from slurmctld (configless, the controller's name from the site's
   DNS); waits for both slurmds to register, verifies both nodes over Ansible (with the BMC's
   firmware) and resumes them;
3. the image held the tuple, and ``verify --bmc`` attests driver to firmware;
4. a job runs on gpu-01;
5. ``baremetal replace`` with a ``replace`` verdict for gpu-01: spare-01 joins gpu-01's
   partition and a ticket (node, fault class, evidence) is posted to the webhook.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

import pytest
import yaml
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.lab import build_repo
from fleetspec.lab.fleet import repo_packages
from fleetspec.lab.golden import GoldenImage, debian_slurm, ensure_golden_image
from fleetspec.lab.slurm import Cluster, process_start_time
from fleetspec.packages import packages_for, slurm_packages
from fleetspec.pipeline import compile_text
from fleetspec.render.baremetal import render_baremetal
from fleetspec.render.slurm import render_slurm
from fleetspec.render.writer import write_tree

from .emulator import PASSWORD, running, system
from .images import serving as serving_images
from .netboot import ADDRESS, inside, need_netboot, started, switched, wait_for
from .webhook import serving as serving_webhook

pytestmark = [pytest.mark.lab, pytest.mark.vm, pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]

NODES = {"gpu-01": ("52:54:00:aa:00:11", "10.77.0.11", "fsnode1"),
         "spare-01": ("52:54:00:aa:00:12", "10.77.0.12", "fsnode2")}
BIOS_IMAGE = b"\x7fFIRMWARE bios 2.5.1\n" * 64
VERDICT = {"status": "sick", "action": "replace", "faults": [
    {"class": "row-remap-failure", "scope": "device", "device": "0000:18:00.0", "action": "replace",
     "detail": "Xid 64: row remapping failure", "source": "kernel-log"}]}


def spec(bmc: str = "http://127.0.0.1:1", hook: str = "http://127.0.0.1:1/tickets",
         image: str = "http://127.0.0.1:1/bios-2.5.1.bin") -> str:
    return f"""\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: metal}}
spec:
  os: debian-12
  stacks:
    hopper: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3", firmware: {{bios: "2.5.1"}}}}
  packages:
    mirror: {{uri: "file:/srv/fleetspec-repo", trusted: true}}
  racks:
    - name: r01
      bmc: {{endpoint: "{bmc}", system: "{{host}}", username: admin, password: env:FLEETSPEC_TEST_BMC_PASSWORD}}
      nodes:
        - {{hosts: gpu-01, gpu: {{model: h100-sxm, count: 1}}, stack: hopper, scheduler: slurm, cpus: 1, sockets: 1,
           memory_gb: 1, bmc: {{bios: {{ProcTurboMode: Enabled}}}}}}
        - {{hosts: spare-01, gpu: {{model: h100-sxm, count: 1}}, stack: hopper, scheduler: slurm, cpus: 1, sockets: 1,
           memory_gb: 1, partition: spares, bmc: {{bios: {{ProcTurboMode: Enabled}}}}}}
  slurm: {{version: "22.05.8", controllers: ctl-01}}
  baremetal:
    pxe: {{server: {ADDRESS}, interface: fsboot0, dhcp_range: "10.77.0.50,10.77.0.60,1h",
          image_url: "http://{ADDRESS}:8089", dns: [{ADDRESS}]}}
    spares: {{nvidia-hopper: spare-01}}
    tickets: {{url: "{hook}"}}
    firmware_images: {{bios: {{"2.5.1": "{image}"}}}}
"""


@pytest.fixture(scope="module")
def golden(tmp_path_factory):  # type: ignore[no-untyped-def]
    need_netboot()
    result = compile_text(spec(), "fleet.yaml")
    assert result.fleet is not None and result.valid, result.located()
    repo = tmp_path_factory.mktemp("repo")
    build_repo(debian_slurm(repo_packages(result.fleet), "22.05.8"), repo)
    return ensure_golden_image(render_baremetal(result.fleet), "hopper", repo)


@contextlib.contextmanager
def munged(key: Path, root: Path):
    """Munge on this machine's default socket, with the fleet's key (slurmctld and the Slurm
    clients find it there). Refused when a munged already answers there: not ours to replace."""
    socket_dir = Path("/run/munge")
    if (socket_dir / "munge.socket.2").exists():
        pytest.fail("a munged already runs on /run/munge/munge.socket.2: this test starts its own there")
    made = not socket_dir.exists()
    socket_dir.mkdir(mode=0o755, exist_ok=True)
    argv = ["munged", "-F", f"--key-file={key}", f"--socket={socket_dir / 'munge.socket.2'}",
            f"--pid-file={root / 'munged.pid'}", f"--log-file={root / 'munged.log'}", f"--seed-file={root / 'munged.seed'}"]
    try:
        with started(argv, root / "munged.out"):
            wait_for(root / "munged.out", "Created socket", 10, "munged", [root / "munged.out"])
            yield
    finally:
        for leftover in socket_dir.glob("munge.socket.2*"):
            leftover.unlink(missing_ok=True)
        if made:
            with contextlib.suppress(OSError):
                socket_dir.rmdir()


# The virtual nodes have no GPU, and their gres.conf names /dev/nvidia0 (slurmd stops when a
# File= does not exist). On a GPU node the driver makes it as the node boots; here the virtual
# machine hands the node that character device (195, 0) the way a VMM passes anything to a
# guest's systemd: an SMBIOS Type 11 string carrying the tmpfiles.extra system credential
# (smbios-type-11(7) and systemd.system-credentials(7), both since systemd 252, Debian 12's).
GPU_DEVICE = "type=11,value=io.systemd.credential:tmpfiles.extra=c /dev/nvidia0 0666 - - - 195:0"


def machine(name: str, root: Path) -> list[str]:
    """The QEMU command line the node's BMC powers on (it adds ``-boot``). TCG: this machine's
    nested KVM boots no Linux guest (docs/lab.md)."""
    mac, _, tap = NODES[name]
    return ["qemu-system-x86_64", "-accel", "tcg", "-m", "1024", "-display", "none", "-no-reboot",
            "-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no", "-device", f"e1000,netdev=n0,mac={mac}",
            "-smbios", GPU_DEVICE, "-serial", f"file:{root / f'{name}.serial'}"]


def inventory(path: Path, image: GoldenImage) -> Path:
    hosts = {name: {"ansible_host": address, "ansible_user": "root", "ansible_python_interpreter": "/usr/bin/python3",
                    "ansible_ssh_private_key_file": str(image.ssh_key),
                    "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"}
             for name, (_, address, _) in NODES.items()}
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def ssh(image: GoldenImage, address: str, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ssh", "-q", "-i", str(image.ssh_key), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                           "-o", "UserKnownHostsFile=/dev/null", "-o", "ConnectTimeout=5", f"root@{address}", command],
                          capture_output=True, text=True, timeout=timeout)


def end_machines(bmc) -> None:  # type: ignore[no-untyped-def]
    """The QEMUs the BMCs started, by the pid and start time they recorded (the harness ends
    them too when it is terminated; this covers a harness that died first)."""
    for name in NODES:
        with contextlib.suppress(KeyError, OSError):
            held = bmc.system(name).get("machine")
            if held and process_start_time(held["pid"]) == held["start"]:
                os.kill(held["pid"], signal.SIGKILL)


def cli(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(app, list(args))
    return done.exit_code, done.output


def test_two_virtual_nodes_are_powered_booted_joined_verified_and_a_spare_replaces_one(
        golden: GoldenImage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETSPEC_TEST_BMC_PASSWORD", PASSWORD)
    work = tmp_path / "work"
    work.mkdir()
    key = tmp_path / ".fleetspec" / "secrets" / "munge.key"
    key.parent.mkdir(parents=True)
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "bios-2.5.1.bin").write_bytes(BIOS_IMAGE)
    served = tmp_path / "served"
    served.mkdir()
    (served / "hopper").symlink_to(golden.files)
    logs = [work / "dnsmasq.log", work / "http.log", *(work / f"{n}.serial" for n in NODES)]
    name = f"fse2e-{os.getpid()}"
    with switched(name, [tap for _, _, tap in NODES.values()]), inside(name), contextlib.ExitStack() as stack:
        stack.enter_context(munged(key, work))
        hook = stack.enter_context(serving_webhook())
        images = stack.enter_context(serving_images(tmp_path / "images"))
        # the BMC reports what the virtual node is: one socket (the spec's sockets and slurmd -C agree)
        systems = [{**system(n, 40 + i, mac, power="Off"), "sockets": 1, "cpus": 1}
                   for i, (n, (mac, _, _)) in enumerate(NODES.items())]
        machines = {n: machine(n, work) for n in NODES}
        bmc = stack.enter_context(running(tmp_path / "bmc", systems, config=f"FLEETSPEC_MACHINES = {machines!r}\n"))
        stack.callback(end_machines, bmc)
        path = tmp_path / "fleet.yaml"
        path.write_text(spec(bmc.endpoint, hook.url, images.url("bios-2.5.1.bin")))
        compiled = compile_text(path.read_text(), str(path))
        assert compiled.fleet is not None and compiled.valid, compiled.located()
        fleet = compiled.fleet
        out = tmp_path / "out"
        write_tree({**render_baremetal(fleet), **{PurePosixPath("slurm") / p.name: t
                                                   for p, t in render_slurm(fleet).items()}}, out)
        assert "SlurmctldParameters=enable_configless" in (out / "slurm" / "slurm.conf").read_text()
        # the site's side of the provisioning network: fixed leases and a DNS server naming the controller
        (work / "site-dhcp.conf").write_text("".join(f"dhcp-host={mac},{address},{n}\n"
                                                      for n, (mac, address, _) in NODES.items()))
        tftp = out / "baremetal" / "tftp"
        stack.enter_context(started(["dnsmasq", "--keep-in-foreground", f"--conf-file={out / 'baremetal' / 'dnsmasq.conf'}",
                                     f"--conf-file={work / 'site-dhcp.conf'}", f"--tftp-root={tftp}", "--user=root",
                                     f"--pid-file={work / 'dnsmasq.pid'}", f"--dhcp-leasefile={work / 'leases'}",
                                     f"--log-facility={work / 'dnsmasq.log'}"], work / "dnsmasq.out"))
        stack.enter_context(started(["dnsmasq", "--keep-in-foreground", "--port=53", f"--listen-address={ADDRESS}",
                                     "--bind-interfaces", "--no-resolv", "--no-hosts", "--conf-file=/dev/null",
                                     f"--host-record=ctl-01,{ADDRESS}", "--user=root", f"--pid-file={work / 'dns.pid'}",
                                     f"--log-facility={work / 'dns.log'}"], work / "dns.out"))
        stack.enter_context(started([sys.executable, "-m", "http.server", "--bind", ADDRESS, "--directory", str(served),
                                     "8089"], work / "http.log"))
        wait_for(work / "dnsmasq.log", "started, version", 10, "dnsmasq", logs)
        cluster = Cluster(work / "slurm", render_slurm(fleet),
                          machines=(ADDRESS, {n: address for n, (_, address, _) in NODES.items()}))
        stack.callback(cluster.stop)
        cluster.start(wait_idle=False, nodes=())
        monkeypatch.setenv("SLURM_CONF", str(cluster.conf))

        # 1. plan: power on from the network, the BIOS attribute, the BIOS firmware
        code, shown = cli("baremetal", "plan", str(path), "--format", "json")
        assert code == 0, shown
        planned = {c["target"].removeprefix("node:"): c for c in json.loads(shown)["changes"]}
        for host in NODES:
            assert planned[host]["after"]["power"] == "On" and planned[host]["after"]["boot"] == "Pxe once", planned[host]
            assert planned[host]["after"]["bios"] == {"ProcTurboMode": "Enabled"}, planned[host]
            assert planned[host]["after"]["firmware"]["bios"]["version"] == "2.5.1", planned[host]

        # 2. apply: boot scripts by MAC, held drained, firmware and BIOS, PXE once, powered on; then
        # the join of the nodes it powered on: munge key, munge and slurmd started (retried while a
        # node is still booting), slurmd registered, verified, resumed
        hosts = inventory(tmp_path / "inventory.yml", golden)
        started_at = time.monotonic()
        code, shown = cli("baremetal", "apply", str(path), "--drain", "slurm", "--tftp", str(tftp),
                          "--join", str(hosts), "--join-timeout", "900")
        joined = time.monotonic() - started_at
        assert code == 0, shown + cluster.log("slurmctld.log")[-3000:]
        for host, (mac, _, _) in NODES.items():
            assert (tftp / "nodes" / f"{mac.replace(':', '-')}.ipxe").read_text() == f"#!ipxe\nchain /hosts/{host}.ipxe\n"
            assert f"{host}: boot once from the network (PXE), powered on" in shown, shown
            assert f"{host}: verify passed, resumed" in shown, shown
            assert bmc.system(host)["boots"] == ["Pxe"] and bmc.system(host)["power_state"] == "On"
        assert images.fetched == ["/bios-2.5.1.bin"] * 2
        assert (work / "http.log").read_text().count("GET /hopper/rootfs.squashfs") == 2
        for host, (_, address, _) in NODES.items():
            assert ssh(golden, address, "hostname").stdout.strip() == host  # its name from the kernel command line
        # a resumed node is pinged before slurmctld counts it responding again ("idle*" until then)
        end = time.monotonic() + 60
        while (states := cluster.node_states()) != {"gpu-01": "idle", "spare-01": "idle"}:
            assert time.monotonic() < end, states
            time.sleep(1)

        # 3. the image held the tuple: every pin installed at its version and held, under the rendered
        # preferences, and no munge key until the join installed the fleet's
        inside_node = ssh(golden, NODES["gpu-01"][1], "cat /proc/cmdline; echo ---; "
                          "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n'; echo ---; "
                          "apt-mark showhold; echo ---; cat /etc/apt/preferences.d/fleetspec; echo ---; "
                          "md5sum < /etc/munge/munge.key")
        assert inside_node.returncode == 0, inside_node.stderr
        cmdline, installed, held, preferences, key_sum = inside_node.stdout.split("---\n")
        assert "fleetspec.node=gpu-01 fleetspec.stack=hopper fleetspec.partition=nvidia-hopper" in cmdline
        versions = {line.split()[0]: line.split()[1:] for line in installed.splitlines()}
        pins = [p for p in (*packages_for(fleet.stacks[0], fleet.os, [fleet.nodes[0].gpu]),
                            *slurm_packages("22.05.8", ["slurm_node"])) if p.condition is None]
        for pin in pins:
            assert versions.get(pin.name) == [pin.version, "hi"], (pin.name, versions.get(pin.name))
        assert sorted(held.split()) == sorted(p.name for p in pins)
        assert preferences == render_baremetal(fleet)[PurePosixPath("baremetal/golden/hopper.pref")]
        assert key_sum.split()[0] == hashlib.md5(key.read_bytes()).hexdigest()
        assert "munge.key" not in subprocess.run(["unsquashfs", "-l", str(golden.files / "rootfs.squashfs")],
                                                 capture_output=True, text=True, check=True).stdout

        # verify attests driver to firmware: the tuple on the node, the BIOS firmware its BMC reports
        code, shown = cli("verify", str(path), "-i", str(hosts), "--bmc", "--format", "json")
        assert code == 0, shown
        report = json.loads(shown)
        assert report["conforms"] and sorted(n["hostname"] for n in report["nodes"]) == sorted(NODES)
        for node in report["nodes"]:
            checks = {c["component"]: c for c in node["checks"]}
            assert checks["driver"]["status"] == "ok" and checks["driver"]["found"] == "580.95.05", checks["driver"]
            assert checks["bios-firmware"]["status"] == "ok" and checks["bios-firmware"]["found"] == "2.5.1", checks

        # 4. it takes work
        job = cluster.run("srun", "-p", "nvidia-hopper", "-w", "gpu-01", "-t", "1", "cat", "/etc/hostname", timeout=120)
        assert job.stdout.strip() == "gpu-01"

        # 5. replace: the spare joins the partition, the ticket goes to the webhook
        verdicts = tmp_path / "verdicts"
        verdicts.mkdir()
        (verdicts / "gpu-01.json").write_text(json.dumps(VERDICT))
        code, shown = cli("baremetal", "replace", str(path), "--facts", str(verdicts))
        assert code == 0, shown
        assert shown.splitlines() == ["gpu-01: spare spare-01 joined partition nvidia-hopper",
                                      "gpu-01: ticket posted (201)"]
        partition = cluster.run("scontrol", "-o", "show", "partition", "nvidia-hopper").stdout
        assert " Nodes=gpu-01,spare-01 " in partition, partition
        (ticket,) = hook.requests
        assert (ticket["body"]["node"], ticket["body"]["fault_class"], ticket["body"]["spare"]) == (
            "gpu-01", "row-remap-failure", "spare-01")
    print(f"apply, from reading the BMCs to both nodes joined: {joined:.0f} s")
