"""Slinky's slurmdbd user on a real MariaDB: made for the spec's networks only, never '%'
(#25, Slinky follow-up).

Slinky's slurmdbd runs in a pod and logs in to the accounting host's MariaDB over the
network. The slurm role used to make ``'slurm'@'%'``: any host that reached port 3306 could
try the password. Now ``slurm.slinky.database_clients`` (CIDRs) become the user's hosts
(``base/netmask``, render/ansible.py ``mariadb_host``), a user left at another host ('%' from
an older fleetspec included) is dropped, and a second run changes nothing. The role's own
task text and SQL template are run here, rendered by Ansible's templar, against a scratch
MariaDB with its grant tables, so the server itself decides who may log in.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetspec.render.ansible import mariadb_host

from .slurmdbd import mariadb

pytestmark = [pytest.mark.slurm]

ROLE = Path(__file__).resolve().parents[2] / "playbooks" / "roles" / "slurm"
PASSWORD = "s3cr'et\\pw"  # a quote and a backslash: both must reach MariaDB unchanged


def _task(name: str) -> dict:
    tasks = yaml.safe_load((ROLE / "tasks" / "slinky_database.yml").read_text())
    return next(t for t in tasks if t["name"].startswith(name))


def _sql(socket: Path, sql: str) -> str:
    done = subprocess.run(["mariadb", f"--socket={socket}", "--user=root", "--batch", "--skip-column-names"],
                          input=sql, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _apply(socket: Path, clients: list[str]) -> bool:
    """The role's read and make tasks, as Ansible renders them; True when it changed."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    variables: dict = {"fleetspec_slinky_database_clients": clients, "fleetspec_slurmdbd_password": PASSWORD}
    check = _task("Check the database clients")
    assert all(Templar(DataLoader(), variables=variables).evaluate_conditional(trust_as_template(c))
               for c in check["ansible.builtin.assert"]["that"])
    read = _task("Read the hosts")
    query = Templar(DataLoader(), variables=variables).template(
        trust_as_template(read["ansible.builtin.command"]["stdin"]))
    variables["_fleetspec_dbd_users"] = {"stdout_lines": _sql(socket, query).splitlines()}
    make = _task("Make slurmdbd's")
    variables.update({k: trust_as_template(v) for k, v in make["vars"].items()})
    templar = Templar(DataLoader(), variables=variables)
    if not templar.evaluate_conditional(trust_as_template(make["when"][1])):
        return False
    _sql(socket, templar.template(trust_as_template((ROLE / "templates" / "slinky_database_users.sql.j2").read_text())))
    return True


def _login(port: int) -> subprocess.CompletedProcess[str]:
    """slurmdbd's login as the pod makes it: user slurm over TCP, from 127.0.0.1."""
    return subprocess.run(["mariadb", "--host=127.0.0.1", f"--port={port}", "--user=slurm",
                           "--batch", "--skip-column-names", "--execute=SELECT 1", "slurm_acct_db"],
                          env={**os.environ, "MYSQL_PWD": PASSWORD}, capture_output=True, text=True, timeout=60)


def _hosts(socket: Path) -> set[str]:
    return set(_sql(socket, "SELECT Host FROM mysql.user WHERE User = 'slurm';").split())


def test_slurmdbd_user_only_for_the_named_networks(tmp_path: Path) -> None:
    with mariadb(tmp_path, grants=True) as (port, socket):
        # mariadb-install-db makes anonymous users at localhost, which MariaDB would match
        # before any network host; a server set up as the role leaves it has none.
        anonymous = _sql(socket, "SELECT Host FROM mysql.user WHERE User = '';").split()
        _sql(socket, "".join(f"DROP USER ''@'{h}';" for h in anonymous))
        # What an older fleetspec left: the user open to any host.
        _sql(socket, "CREATE DATABASE slurm_acct_db; CREATE USER 'slurm'@'%' IDENTIFIED BY 'old';"
                     "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'%';")
        pods = mariadb_host("10.244.0.0/16")
        assert pods == "10.244.0.0/255.255.0.0"
        assert _apply(socket, [pods])
        assert _hosts(socket) == {pods}  # '%' is gone
        refused = _login(port)  # 127.0.0.1 is outside the pod network: MariaDB refuses it
        assert refused.returncode != 0 and "Access denied" in refused.stderr
        assert not _apply(socket, [pods])  # idempotent: nothing to change
        loopback = mariadb_host("127.0.0.0/8")
        assert _apply(socket, [loopback])
        assert _hosts(socket) == {loopback}
        allowed = _login(port)
        assert allowed.returncode == 0, allowed.stderr
        assert allowed.stdout.split() == ["1"]
        assert not _apply(socket, [loopback])
        # A changed password is set again on the next run.
        _sql(socket, f"ALTER USER 'slurm'@'{loopback}' IDENTIFIED BY 'rotated';")
        assert _apply(socket, [loopback]) and _login(port).returncode == 0


def test_no_networks_is_refused_by_the_role_and_by_validate() -> None:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    check = _task("Check the database clients")["ansible.builtin.assert"]["that"]
    for clients in ([], ["%"], ["10.244.%"]):
        templar = Templar(DataLoader(), variables={"fleetspec_slinky_database_clients": clients})
        assert not all(templar.evaluate_conditional(trust_as_template(c)) for c in check), clients
