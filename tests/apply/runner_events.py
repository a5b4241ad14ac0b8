"""Real ansible-runner event dicts for the apply progress model: a playbook on two hosts on
the local connection (one task ok, one changed, a loop whose items are named, a skipped
task, an ignored failure, a task whose name holds Rich markup and an emoji code, and a
failure on one host) and a third host over SSH to a closed loopback port (unreachable),
run through ansible-runner with an ``event_handler`` that keeps every event dict as
ansible-runner hands it over.

``python -m tests.apply.runner_events`` (under the heavy lock: it runs ansible) rewrites
``tests/apply/data/runner_events.json``, the recording the fast tests replay;
``tests/apply/test_progress_real.py`` runs the same playbook again and checks the live
events give the same progress as the recording.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RECORDING = HERE / "data" / "runner_events.json"
HOSTS = ("gpu-a01", "gpu-a02", "gpu-a03")
FAILING = "gpu-a02"
UNREACHABLE = "gpu-a03"
MARKUP_TASK = "Pin [bold red]drivers[/] :fire: for good"

PLAY = f"""\
- name: Progress events
  hosts: all
  gather_facts: false
  tasks:
    - name: Read the driver version
      ansible.builtin.command: echo 580.95.05
      changed_when: false

    - name: Write the NCCL marker
      ansible.builtin.copy:
        dest: "{{{{ marker_dir }}}}/{{{{ inventory_hostname }}}}"
        content: "nccl 2.28.9\\n"
        mode: "0644"

    - name: Hold the pinned packages
      ansible.builtin.command: "echo hold {{{{ item }}}}"
      loop: [libnccl2, libnccl-dev, cuda-toolkit-13-0]
      changed_when: item == 'libnccl2'

    - name: Reboot for a driver change
      ansible.builtin.command: echo reboot
      when: false

    - name: Probe a GPU that may be absent
      ansible.builtin.command: "false"
      ignore_errors: true

    - name: "{MARKUP_TASK}"
      ansible.builtin.command: echo pinned
      changed_when: false

    - name: Install NCCL
      ansible.builtin.fail:
        msg: "no candidate for libnccl2=2.28.9-1+cuda13.0"
      when: inventory_hostname == '{FAILING}'

    - name: Record that this host was converged
      ansible.builtin.command: echo done
      changed_when: false
"""


def run(work: Path) -> list[dict[str, Any]]:
    """Run the playbook for real; every event dict ansible-runner passed to the handler."""
    import ansible_runner

    project = work / "project"
    project.mkdir(parents=True)
    (project / "site.yml").write_text(PLAY)
    (project / "ansible.cfg").write_text("[defaults]\nhost_key_checking = False\nforks = 3\n")
    (work / "markers").mkdir()
    (work / "private").mkdir()
    if shutil.which("ssh") is None:
        raise RuntimeError("ssh is missing: openssh-client comes with ./scripts/test's Debian packages")
    inventory = work / "hosts.yml"
    hosts = "".join(f"    {h}:\n      ansible_connection: local\n      ansible_python_interpreter: {sys.executable}\n"
                    for h in HOSTS if h != UNREACHABLE)
    hosts += (f"    {UNREACHABLE}:\n      ansible_host: 127.0.0.1\n      ansible_port: {_closed_port()}\n"
              "      ansible_ssh_common_args: -o ConnectTimeout=5 -o BatchMode=yes -o StrictHostKeyChecking=no\n")
    inventory.write_text(f"all:\n  vars:\n    marker_dir: {work / 'markers'}\n  hosts:\n{hosts}")
    events: list[dict[str, Any]] = []

    def keep(event: Mapping[str, Any]) -> bool:
        events.append(json.loads(json.dumps(event)))  # a deep copy, as plain JSON data
        return True

    runner = ansible_runner.run(private_data_dir=str(work / "private"), project_dir=str(project),
                                playbook="site.yml", inventory=str(inventory), quiet=True, event_handler=keep,
                                envvars={"ANSIBLE_CONFIG": str(project / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
                                         "ANSIBLE_HOME": str(work / "ansible-home")})
    if runner.status != "failed":  # the play fails on FAILING by design
        raise SystemExit(f"unexpected run status {runner.status!r}, rc {runner.rc}")
    return events


def _closed_port() -> int:
    """A loopback port nothing listens on (bound once by us, then closed): SSH to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def recorded() -> list[dict[str, Any]]:
    return json.loads(RECORDING.read_text())["events"]


def main() -> None:
    from importlib.metadata import version

    with tempfile.TemporaryDirectory(prefix="fleetspec-events-") as tmp:
        events = run(Path(tmp))
    RECORDING.parent.mkdir(exist_ok=True)
    RECORDING.write_text(json.dumps({
        "source": "python -m tests.apply.runner_events: a real ansible-runner run, local connection",
        "ansible_core": version("ansible-core"),
        "ansible_runner": version("ansible-runner"),
        "events": events,
    }, indent=1) + "\n")
    print(f"{len(events)} events -> {RECORDING}")


def apply_events(raw: list[dict[str, Any]], wave: str | None, redact: Any = None) -> list[Any]:
    """The `ApplyEvent`s apply makes of these ansible-runner event dicts: through the same
    collector `run_playbook` hands ansible-runner and the rollout's own host-event hook."""
    from fleetspec.apply.ansible import _Collector
    from fleetspec.apply.rollout import ApplyEvent, _host_event
    from fleetspec.secrets import Redactor

    out: list[ApplyEvent] = []

    def say(kind: str, message: str, wave: str | None = None, hosts: tuple[str, ...] = (), ok: bool = True,
            task: Any = None) -> None:
        out.append(ApplyEvent(kind, message, wave, tuple(hosts), ok, task))

    collector = _Collector(lambda e: _host_event(say, redact or Redactor(), wave, e))
    for event in raw:
        collector(event)
    return out


if __name__ == "__main__":
    main()
