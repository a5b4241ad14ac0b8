"""Make slurmdbd's accounts what ``accounts.json`` says, with sacctmgr, idempotently.

Run on a Slurm controller by the slurm role (``python3 slurm_accounts.py accounts.json``),
after slurmctld has registered the cluster's TRES with slurmdbd. It reads what slurmdbd
holds (``sacctmgr show``), works out the commands that close the gap, runs them with
``sacctmgr --immediate`` and prints one JSON object: ``changed``, the ``commands`` run,
and ``stale`` (accounts fleetspec made that the spec no longer names: reported, never
removed, since their usage and running jobs are the site's to settle). A second run with
the same file runs nothing. ``--check`` prints the commands without running them.

Per account (sacctmgr(1)): ``add account`` when the cluster has no association for it,
``modify account ... set GrpTRES=... Fairshare=...`` when either differs (a TRES no longer
capped is set to -1, sacctmgr's "no limit"), ``add user`` for each member not yet
associated, and ``remove user`` for a member who left, only in accounts fleetspec made
(Description "fleetspec tenant"): an account the site made keeps the users it had.
Members are the declared users and the members of the named Unix groups on this host
(supplementary members and users whose primary group it is).

Standard library only, Python 3.8 syntax (node_side/__init__.py).
"""

import argparse
import grp
import json
import pwd
import subprocess
import sys

DESCRIPTION = "fleetspec tenant"
SACCTMGR_TIMEOUT_S = 60


class AccountsError(Exception):
    """What stopped the run, worded for the operator."""


def _sacctmgr(args, immediate=False):
    cmd = ["sacctmgr"] + (["--immediate"] if immediate else []) + list(args)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=SACCTMGR_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise AccountsError("{} could not run: {}".format(" ".join(cmd), exc)) from None
    if done.returncode != 0:
        text = (done.stderr + done.stdout).strip()
        hint = ""
        if "no TRES known" in text:
            hint = (" (slurmdbd does not track that GPU type yet: slurmctld registers the rendered "
                    "AccountingStorageTRES when it starts; start it first)")
        raise AccountsError("{} failed ({}): {}{}".format(" ".join(cmd), done.returncode, text, hint))
    return done.stdout


def parse_tres(text):
    """{TRES name: count} from sacctmgr's ``gres/gpu:h100=4,cpu=8`` (empty: no limits)."""
    out = {}
    for item in text.split(","):
        if "=" in item:
            name, value = item.rsplit("=", 1)
            out[name.strip().lower()] = int(value)
    return out


def current(cluster):
    """(associations, descriptions): {account: {"tres", "fairshare", "users"}} for the cluster,
    and {account: description} for every account slurmdbd holds."""
    assocs = {}
    rows = _sacctmgr(["--noheader", "--parsable2", "show", "association", "cluster=" + cluster,
                      "format=account,user,partition,grptres,fairshare"])
    for line in rows.splitlines():
        fields = line.split("|")
        if len(fields) != 5:
            continue
        account, user, partition, tres, fairshare = fields
        entry = assocs.setdefault(account, {"tres": {}, "fairshare": None, "users": set()})
        if user:
            entry["users"].add(user)
        elif not partition:
            entry["tres"] = parse_tres(tres)
            entry["fairshare"] = fairshare
    descriptions = {}
    for line in _sacctmgr(["--noheader", "--parsable2", "show", "account", "format=account,description"]).splitlines():
        name, _, description = line.partition("|")
        descriptions[name] = description
    return assocs, descriptions


def members(account):
    """The account's users: declared ones and the named groups' members on this host."""
    users = list(account["users"])
    for group in account["groups"]:
        try:
            entry = grp.getgrnam(group)
        except KeyError:
            raise AccountsError("tenant {!r} names group {!r}, which this host does not know (getent group {}); "
                                "create it, or drop it from slurm.tenants".format(account["name"], group, group)) from None
        users += list(entry.gr_mem)
        users += sorted(p.pw_name for p in pwd.getpwall() if p.pw_gid == entry.gr_gid)
    return sorted(set(u.lower() for u in users))


def plan(desired, assocs, descriptions):
    """(sacctmgr argument lists to run, stale account names)."""
    cluster = desired["cluster"]
    commands = []
    for account in desired["accounts"]:
        name = account["name"]
        want = parse_tres(account["grp_tres"])
        fairshare = str(account["fairshare"])
        have = assocs.get(name)
        if have is None:
            commands.append(["add", "account", name, "cluster=" + cluster, "description=" + DESCRIPTION,
                             "organization=fleetspec", "fairshare=" + fairshare, "grptres=" + account["grp_tres"]])
            have = {"tres": want, "fairshare": fairshare, "users": set()}
        settings = []
        tres = dict(want)
        tres.update({t: -1 for t in have["tres"] if t not in want})
        if have["tres"] != want:
            settings.append("grptres=" + ",".join("{}={}".format(t, n) for t, n in sorted(tres.items())))
        if have["fairshare"] != fairshare:
            settings.append("fairshare=" + fairshare)
        if settings:
            commands.append(["modify", "account", "where", "name=" + name, "cluster=" + cluster, "set"] + settings)
        wanted_users = members(account)
        for user in wanted_users:
            if user not in have["users"]:
                commands.append(["add", "user", user, "account=" + name, "cluster=" + cluster])
        if descriptions.get(name) == DESCRIPTION:
            for user in sorted(have["users"] - set(wanted_users)):
                commands.append(["remove", "user", "where", "name=" + user, "account=" + name, "cluster=" + cluster])
    named = set(a["name"] for a in desired["accounts"])
    stale = sorted(a for a in assocs if descriptions.get(a) == DESCRIPTION and a not in named)
    return commands, stale


def load(path):
    try:
        with open(path, encoding="utf-8") as handle:
            desired = json.load(handle)
        cluster, accounts = desired["cluster"], desired["accounts"]
        if not isinstance(cluster, str) or not isinstance(accounts, list):
            raise TypeError("cluster must be a string and accounts a list")
        for account in accounts:
            for key in ("name", "users", "groups", "fairshare", "grp_tres"):
                if key not in account:
                    raise KeyError(key)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AccountsError("{}: not an accounts file fleetspec renders ({}: {}); render again".format(
            path, type(exc).__name__, exc)) from None
    return desired


def reconcile(path, check=False):
    """The JSON-able result of one run (see the module docstring)."""
    desired = load(path)
    assocs, descriptions = current(desired["cluster"])
    commands, stale = plan(desired, assocs, descriptions)
    if not check:
        for args in commands:
            _sacctmgr(args, immediate=True)
    return {"changed": bool(commands), "commands": [" ".join(c) for c in commands], "stale": stale}


def main(argv=None):
    parser = argparse.ArgumentParser(description="Make slurmdbd's accounts what accounts.json says.")
    parser.add_argument("accounts", help="accounts.json rendered by fleetspec")
    parser.add_argument("--check", action="store_true", help="print the commands, run none")
    args = parser.parse_args(argv)
    try:
        result = reconcile(args.accounts, check=args.check)
    except AccountsError as exc:
        print("slurm_accounts: {}".format(exc), file=sys.stderr)
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
