"""Site settings, read by the real slurmctld the tests start (Debian's 22.05.8), and the
parameter list fleetspec checks them against, cross-checked with that build."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetspec.pipeline import compile_text
from fleetspec.render.slurm import render_slurm
from fleetspec.site.slurm import parameters
from tests.site.specs import spec

from .cluster import SlurmError, running

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]

LIBSLURM = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm/libslurmfull.so")
SLURMDBD = Path("/usr/sbin/slurmdbd")
SITE = spec(
    "    settings:\n"
    "      SchedulerParameters: [bf_continue, \"bf_max_job_test=500\", \"default_queue_depth=200\"]\n"
    "      KillWait: 45\n"
    "      MessageTimeout: 20\n"
    "      PriorityWeightAge: 5000\n"
    "      TopologyParam: SwitchAsNodeRank\n"
    "      PropagateResourceLimitsExcept: \"MEMLOCK,NOFILE\"\n"
    "    partitions:\n"
    "      nvidia-hopper:\n"
    "        settings: {PriorityTier: 7, OverSubscribe: EXCLUSIVE, MaxNodes: 2, DefaultTime: \"0:20:00\"}\n",
    node_settings="          slurm_settings: {Weight: 17, TmpDisk: 1024}",
    version="22.05.8",
)


def _fields(text: str) -> dict[str, str]:
    return dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", text))


def test_slurmctld_takes_the_site_settings(tmp_path):
    result = compile_text(SITE, "fleet.yaml")
    assert result.valid, [f.message for f in result.located()]
    with running(tmp_path, render_slurm(result.fleet)) as c:
        config = {k.strip(): v.strip() for k, _, v in
                  (line.partition("=") for line in c.run("scontrol", "show", "config").stdout.splitlines())}
        assert config["SchedulerParameters"] == "bf_continue,bf_max_job_test=500,default_queue_depth=200"
        assert config["KillWait"] == "45 sec" and config["MessageTimeout"] == "20 sec"
        assert config["TopologyParam"] == "SwitchAsNodeRank"
        assert config["PropagateResourceLimitsExcept"] == "MEMLOCK,NOFILE"
        part = _fields(c.run("scontrol", "show", "partition", "nvidia-hopper").stdout)
        assert (part["PriorityTier"], part["OverSubscribe"], part["MaxNodes"], part["DefaultTime"]) == \
            ("7", "EXCLUSIVE", "2", "00:20:00")
        node = _fields(c.run("scontrol", "show", "node", "h100-01").stdout)
        assert (node["Weight"], node["TmpDisk"]) == ("17", "1024")


def test_slurmctld_refuses_what_fleetspec_refuses(tmp_path):
    """Why the check exists: the same slurmctld stops on a misspelt key."""
    result = compile_text(SITE, "fleet.yaml")
    files = render_slurm(result.fleet)
    conf = next(p for p in files if p.name == "slurm.conf")
    files[conf] = files[conf].replace("KillWait=45", "KillWiat=45")
    assert compile_text(SITE.replace("KillWait", "KillWiat"), "fleet.yaml").valid is False
    with pytest.raises(SlurmError, match="(?i)slurmctld"), running(tmp_path, files, wait_idle=False):
        pass


CGROUP_SITE = spec("    cgroup_settings: {ConstrainSwapSpace: yes, AllowedSwapSpace: 10, MinRAMSpace: 200}\n",
                   version="22.05.8")
# A value of the type cgroup.conf(5) of 22.05 gives each key (the parser checks types).
CGROUP_VALUES = {"AllowedDevicesFile": "/dev/null", "CgroupMountpoint": "/sys/fs/cgroup",
                 "CgroupPlugin": "autodetect", "CgroupReleaseAgentDir": "/tmp", "MemorySwappiness": "10"}
CGROUP_BOOLEANS = ("CgroupAutomount", "Constrain", "IgnoreSystemd")


def test_slurmctld_parses_the_site_cgroup_settings(tmp_path):
    """slurmctld 22.05 parses cgroup.conf at startup: the one fleetspec renders with site
    settings starts it, and a key fleetspec refuses stops the same slurmctld."""
    result = compile_text(CGROUP_SITE, "fleet.yaml")
    assert result.valid, [f.message for f in result.located()]
    files = render_slurm(result.fleet)
    cgroup = next(p for p in files if p.name == "cgroup.conf")
    assert "ConstrainSwapSpace=YES\nAllowedSwapSpace=10\nMinRAMSpace=200" in files[cgroup]
    with running(tmp_path / "good", files) as c:
        assert (c.root / "etc" / "cgroup.conf").read_text() == files[cgroup]
    bad = CGROUP_SITE.replace("AllowedSwapSpace", "AllowedSwapSpcae")
    assert compile_text(bad, "fleet.yaml").valid is False
    files[cgroup] = files[cgroup].replace("AllowedSwapSpace", "AllowedSwapSpcae")
    with pytest.raises(SlurmError, match="unrecognized key: AllowedSwapSpcae"), \
            running(tmp_path / "bad", files, wait_idle=False):
        pass


def test_slurmctld_parses_every_cgroup_key_fleetspec_accepts_for_22_05(tmp_path):
    """Every cgroup.conf key fleetspec accepts on 22.05, each with a value of its type, in
    one file: Debian's slurmctld 22.05.8 parses it and comes up (this found that 22.05.8
    stops on CgroupReleaseAgentDir, which the man page still lists)."""
    result = compile_text(spec(version="22.05.8"), "fleet.yaml")
    files = render_slurm(result.fleet)
    cgroup = next(p for p in files if p.name == "cgroup.conf")
    table = parameters().files["cgroup.conf"]
    keys = sorted(k for k in table.known.values() if table.defunct.get(k) not in ("22.05", "unconfirmed"))
    lines = [f"{k}={CGROUP_VALUES.get(k) or ('no' if k.startswith(CGROUP_BOOLEANS) else '100')}" for k in keys]
    files[cgroup] = "\n".join(lines) + "\n"
    with running(tmp_path, files) as c:
        assert c.run("scontrol", "ping").returncode == 0


def test_every_key_fleetspec_lets_through_for_22_05_is_in_debians_slurm():
    """Each 22.05 parameter fleetspec accepts is a key the 22.05.8 build parses (its name
    is a string in libslurmfull.so; the linker may share a name's tail with a longer one)."""
    if not LIBSLURM.exists():
        pytest.fail(f"{LIBSLURM} is missing: install slurm-wlm (scripts/test does)")
    strings = set(re.findall(rb"[A-Za-z][A-Za-z0-9]{2,}", LIBSLURM.read_bytes()))
    text = b"\n".join(strings).lower()
    missing = {name: sorted(k for k in table.known.values() if k.lower().encode() not in text)
               for name, table in parameters().files.items() if name != "slurmdbd.conf"}
    assert missing == {name: [] for name in missing}
    # And the newer keys 22.05 refuses are really absent from it (partition and node keys
    # such as Exclusive or Parameters are common words there, so those two are left out).
    newer = [k for name in ("slurm.conf", "cgroup.conf") for k, _ in parameters().files[name].added.values()
             if re.search(rb"\b" + k.lower().encode() + rb"\b", text)]
    assert newer == []
    # Keys a later release removed (dated in the catalog) are keys 22.05.8 still parses,
    # which is why fleetspec accepts them before that release.
    dated = [k for table in parameters().files.values() for k, since in table.defunct.items()
             if since not in ("unconfirmed", "22.05")]
    assert dated and [k for k in dated if k.lower().encode() not in text] == []


def _strings(binary: Path) -> bytes:
    if not binary.exists():
        pytest.fail(f"{binary} is missing: install Debian's slurm packages (scripts/test does)")
    return b"\n".join(set(re.findall(rb"[A-Za-z][A-Za-z0-9]{2,}", binary.read_bytes()))).lower()


def test_slurmdbd_conf_keys_match_debians_slurmdbd():
    """slurmdbd parses slurmdbd.conf itself (src/slurmdbd/read_config.c is linked into the
    daemon): every 22.05 key fleetspec accepts is a string in Debian's 22.05.8 slurmdbd, and
    the keys fleetspec holds back for newer releases are not."""
    text = _strings(SLURMDBD)
    table = parameters().files["slurmdbd.conf"]
    assert sorted(k for k in table.known.values() if k.lower().encode() not in text) == []
    assert [k for k, _ in table.added.values() if re.search(rb"\b" + k.lower().encode() + rb"\b", text)] == []
