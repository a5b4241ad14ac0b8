"""Site Slurm settings: every key checked against the release's parameter list, the
keys fleetspec owns refused with the field that sets them, values kept as written and
never able to add a line or a key."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

import pytest
import yaml

from fleetspec.pipeline import compile_text
from fleetspec.render.slurm import render_slurm
from fleetspec.site.slurm import parameters

from .specs import spec

CONF = PurePosixPath("slurm/slurm.conf")


def _errors(text: str) -> list:
    return [f for f in compile_text(text, "fleet.yaml").located() if f.severity.name == "ERROR"]


def _rendered(text: str) -> dict:
    result = compile_text(text, "fleet.yaml")
    assert result.valid, [f.message for f in result.located()]
    return render_slurm(result.fleet)


@pytest.mark.parametrize("key, says", [
    ("SlurmctldHost", "spec.slurm.controllers"),          # owned
    ("AccountingStorageHost", "spec.slurm.accounting"),   # owned, a family
    ("GresTypes", "spec.racks[].nodes[].gpu"),            # owned
    ("SchedulerParamters", "Did you mean 'SchedulerParameters'?"),  # a typo
    ("NoSuchKnob", "is not a slurm.conf parameter"),      # unknown
])
def test_owned_unknown_and_typo_each_give_one_located_error(key: str, says: str) -> None:
    text = spec(f"    settings:\n      KillWait: 30\n      {key}: x\n")
    errors = _errors(text)
    assert len(errors) == 1, [e.message for e in errors]
    (error,) = errors
    assert error.rule == "site-settings" and says in error.message
    assert (error.line, error.column) == (text.splitlines().index(f"      {key}: x") + 1, 7)


def test_values_stay_as_written_and_keys_take_slurms_spelling() -> None:
    conf = _rendered(spec("    settings:\n"
                          "      schedulerparameters: [bf_continue, \"bf_max_job_test=1000\", defer]\n"
                          "      PriorityWeightAge: 5000\n"
                          "      TopologyParam: SwitchAsNodeRank\n"
                          "      ReturnToService: 2\n"))[CONF]
    # fleetspec renders SchedulerParameters (backfill sized to MaxTime): the site's replaces it.
    assert "\nSchedulerParameters=bf_continue,bf_max_job_test=1000,defer  # spec.slurm.settings\n" in conf
    assert conf.count("SchedulerParameters=") == 1
    assert "\nTopologyParam=SwitchAsNodeRank\n" in conf
    # A key fleetspec renders a default for is replaced in place, never written twice.
    assert conf.count("ReturnToService=") == 1 and "ReturnToService=2  # spec.slurm.settings" in conf


@pytest.mark.parametrize("value", ['"30 Include=/etc/evil"', '"30\\nSlurmUser=root"', '"30 #"', '"a\\"b"', '""',
                                   "[a, \"b,c\"]"])
def test_values_cannot_add_a_key_or_a_line(value: str) -> None:
    text = spec(f"    settings:\n      KillWait: {value}\n")
    errors = _errors(text)
    assert len(errors) == 1, [e.message for e in errors]
    assert errors[0].line == text.splitlines().index(f"      KillWait: {value}") + 1


def test_partition_and_node_parameters_land_on_their_lines() -> None:
    text = spec("    partitions:\n      nvidia-hopper:\n        settings: {PriorityTier: 10, Hidden: true}\n",
                node_settings="          slurm_settings: {Weight: 10, MemSpecLimit: 1024}")
    conf = _rendered(text)[CONF]
    node = next(line for line in conf.splitlines() if line.startswith("NodeName="))
    part = next(line for line in conf.splitlines() if line.startswith("PartitionName="))
    assert " Weight=10 MemSpecLimit=1024 " in node
    assert part.endswith(" PriorityTier=10 Hidden=YES")


def test_partition_and_node_owned_keys_name_their_fields() -> None:
    errors = _errors(spec("    partitions:\n      nvidia-hopper:\n        settings: {MaxTime: \"1:00:00\"}\n",
                          node_settings="          slurm_settings: {Gres: \"gpu:h100:4\"}"))
    messages = sorted(e.message for e in errors)
    assert len(messages) == 2
    assert "spec.racks[].nodes[].gpu" in messages[0] and "max_time" in messages[1]


def test_a_command_line_keeps_its_blanks_in_quotes() -> None:
    """BNL's InteractiveStepOptions (brownfield/bnl-nsls2-2025) renders back exactly as written;
    blanks stay refused in any other key, and a quote or '#' in a command line too."""
    line = 'InteractiveStepOptions="--interactive --pty --preserve-env --mpi=none $SHELL"'
    conf = _rendered(spec("    settings:\n      InteractiveStepOptions: "
                          "\"--interactive --pty --preserve-env --mpi=none $SHELL\"\n"))[CONF]
    assert line in conf.splitlines()
    for value in ('"--pty \\"x\\""', '"--pty #x"', '"--pty\\t$SHELL"', '"--pty\\n$SHELL"'):
        assert len(_errors(spec(f"    settings:\n      InteractiveStepOptions: {value}\n"))) == 1, value
    assert len(_errors(spec("    settings:\n      MailProg: \"/bin/mail -s x\"\n"))) == 1


def test_cgroup_and_slurmdbd_settings() -> None:
    text = spec("    accounting: {host: db-01}\n"
                "    cgroup_settings: {ConstrainSwapSpace: yes, AllowedSwapSpace: 10}\n"
                "    slurmdbd_settings: {PurgeJobAfter: 24month, ArchiveJobs: yes}\n")
    files = _rendered(text)
    assert "ConstrainSwapSpace=YES\nAllowedSwapSpace=10\n" in files[PurePosixPath("slurm/cgroup.conf")]
    dbd = files[PurePosixPath("slurm/slurmdbd.conf")]
    assert dbd.count("PurgeJobAfter=") == 1 and "PurgeJobAfter=24month  #" in dbd and "ArchiveJobs=YES" in dbd
    errors = _errors(spec("    accounting: {host: db-01}\n    cgroup_settings: {ConstrainDevices: no}\n"
                          "    slurmdbd_settings: {StoragePass: hunter2}\n"))
    assert sorted(e.message.split(" ")[0] for e in errors) == ["ConstrainDevices", "StoragePass"]
    assert all("hunter2" not in e.message for e in errors)


def _site(extra: str, version: str) -> list[tuple[str, str]]:
    """(severity, message) of the site-settings findings for ``extra`` on Slurm ``version``."""
    return [(f.severity.name, f.message) for f in compile_text(spec(extra, version=version), "f.yaml").located()
            if f.rule == "site-settings"]


@pytest.mark.parametrize(("extra", "before", "since"), [
    # The release that added each key, from SchedMD's changelogs (catalog `added`).
    ("    settings: {MaxBatchRequeue: 3}\n", "22.05.8", "23.02.7"),
    ("    settings: {PrologTimeout: 300}\n", "24.11.6", "25.05.3"),
    ("    settings: {HttpParserType: http_parser/libhttp_parser}\n", "25.05.3", "25.11.8"),
    ("    partitions: {nvidia-hopper: {settings: {ExclusiveTopo: \"YES\"}}}\n", "23.11.10", "24.05.4"),
    ("    cgroup_settings: {SystemdTimeout: 2000}\n", "23.11.10", "24.05.4"),
    ("    slurmdbd_settings: {MaxPurgeLimit: 10000}\n", "25.05.3", "25.11.8"),
])
def test_a_key_is_an_error_before_the_release_that_added_it(extra: str, before: str, since: str) -> None:
    old = _site(extra, before)
    assert [sev for sev, _ in old] == ["ERROR"] and f"from Slurm {since[:5]} on" in old[0][1], old
    assert _site(extra, since) == []  # checked, so no "unconfirmed" warning either


def test_a_removed_key_is_an_error_from_its_release_on() -> None:
    assert _site("    cgroup_settings: {ConstrainKmemSpace: no}\n", "23.02.7") == []
    gone = _site("    cgroup_settings: {ConstrainKmemSpace: no}\n", "23.11.10")
    assert [sev for sev, _ in gone] == ["ERROR"] and "since Slurm 23.11" in gone[0][1]
    assert _site("    settings: {GetEnvTimeout: 5}\n", "22.05.8") == []  # 22.05.8 reads it
    assert [sev for sev, _ in _site("    settings: {GetEnvTimeout: 5}\n", "25.05.3")] == ["ERROR"]
    # Debian's slurmctld 22.05.8 stops on it although the man page lists it.
    assert [sev for sev, _ in _site("    cgroup_settings: {CgroupReleaseAgentDir: /tmp}\n", "22.05.8")] == ["ERROR"]
    defunct = _errors(spec("    settings: {SchedulerAuth: x}\n"))
    assert len(defunct) == 1 and "defunct" in defunct[0].message


def test_a_key_no_changelog_dates_warns_after_22_05() -> None:
    assert [sev for sev, _ in _site("    settings: {NamespaceType: namespace/linux}\n", "22.05.8")] == ["ERROR"]
    later = _site("    settings: {NamespaceType: namespace/linux}\n", "25.11.8")
    assert [sev for sev, _ in later] == ["WARNING"] and "no SchedMD changelog" in later[0][1]


def test_a_key_a_real_release_refuses_is_an_error_there_and_before() -> None:
    """catalog `refused_by`: Debian's slurmctld 24.11.5 stops on HealthCheckTimeout, 26.05.5
    parses it (tests/slurm/test_parameters_real.py); no changelog dates it in between."""
    for version in ("23.11.10", "24.11.6"):
        found = _site("    settings: {HealthCheckTimeout: 60}\n", version)
        assert [sev for sev, _ in found] == ["ERROR"] and "Slurm 24.11's slurmctld refuses it" in found[0][1], found
    assert [sev for sev, _ in _site("    settings: {HealthCheckTimeout: 60}\n", "25.11.8")] == ["WARNING"]
    assert [sev for sev, _ in _site("    settings: {SlurmstepdParameters: x}\n", "26.05.5")] == ["ERROR"]


def test_the_same_key_twice_in_two_spellings_is_refused() -> None:
    errors = _errors(spec("    settings: {KillWait: 30, killwait: 40}\n"))
    assert len(errors) == 1 and "twice" in errors[0].message


def test_pyxis_keeps_prolog_contain() -> None:
    text = spec("    containers: pyxis\n    pyxis: {enroot: \"3.5.0\", pyxis: \"0.20.0\"}\n"
                "    settings: {PrologFlags: X11}\n")
    errors = _errors(text)
    assert len(errors) == 1 and "Contain" in errors[0].message
    conf = _rendered(text.replace("PrologFlags: X11", "PrologFlags: \"Contain,X11\""))[CONF]
    assert conf.count("PrologFlags=") == 1 and "PrologFlags=Contain,X11" in conf


def test_parameter_lists_have_sources_and_no_overlap() -> None:
    for name, table in parameters().files.items():
        assert table.sources and table.manual.startswith("https://"), name
        assert not set(table.known) & set(table.added), name
        releases = {since for _, since in table.added.values()} | set(table.defunct.values())
        assert all(r == "unconfirmed" or re.fullmatch(r"\d\d\.\d\d", r) for r in releases), name


def test_every_plugin_selector_restarts_the_daemons() -> None:
    """Plugins load when a daemon starts: a slurm.conf key that picks one (...Type,
    ...Plugin(s)) is a restart, in every release fleetspec knows, not a reconfigure."""
    table = parameters().files["slurm.conf"]
    selectors = [n for n in table.names() if n.endswith(("Type", "Types", "Plugin", "Plugins"))
                 and n not in table.defunct]
    assert selectors and [n for n in selectors if not table.needs_restart(n)] == []


def test_plan_classes_follow_slurms_documentation() -> None:
    from fleetspec.plan import make_plan

    def plan(old_extra: str, new_extra: str):
        old = compile_text(spec(old_extra), "f.yaml").fleet
        new = compile_text(spec(new_extra), "f.yaml").fleet
        return {c.target: c for c in make_plan(new, old).changes}

    tuned = plan("    settings: {SchedulerParameters: bf_continue}\n",
                 "    settings: {SchedulerParameters: \"bf_continue,defer\"}\n")
    assert tuned["slurm:slurm.conf"].disruption.value == "reconfigure"
    assert "SchedulerParameters=bf_continue,defer  # spec.slurm.settings" in tuned["slurm:slurm.conf"].after
    plugin = plan("", "    settings: {JobCompType: jobcomp/filetxt}\n")
    assert plugin["slurm:slurm.conf"].disruption.value == "restart-daemon"
    part = plan("", "    partitions: {nvidia-hopper: {settings: {PriorityTier: 3}}}\n")
    assert part["slurm:slurm.conf"].disruption.value == "reconfigure"
    cgroup = plan("", "    cgroup_settings: {ConstrainSwapSpace: yes}\n")
    assert cgroup["slurm:cgroup.conf"].disruption.value == "restart-daemon"


def test_slinky_carries_settings_into_the_chart_or_refuses_them() -> None:
    slinky = ("    mode: slinky\n    settings: {SchedulerParameters: [bf_continue, defer]}\n"
              "    partitions: {nvidia-hopper: {settings: {PriorityTier: 4}}}\n")
    text = spec(slinky) + "  kubernetes: {version: \"1.34\"}\n"
    result = compile_text(text, "f.yaml")
    assert result.valid, [f.message for f in result.located()]
    values = yaml.safe_load(render_slurm(result.fleet)[PurePosixPath("slurm/slinky-values.yaml")])
    assert values["controller"]["extraConfMap"]["SchedulerParameters"] == "bf_continue,defer"
    assert values["partitions"]["nvidia-hopper"]["configMap"]["PriorityTier"] == "4"


def test_slinky_carries_node_settings_into_the_nodeset_conf() -> None:
    """A NodeSet's extraConfMap is slurmd's --conf, the NodeName parameters of a dynamic
    node (NodeSet CRD spec.extraConf, slurm-operator v1.2.1; slurmd(8) --conf)."""
    slinky = "    mode: slinky\n"
    k8s = "  kubernetes: {version: \"1.34\"}\n"
    result = compile_text(spec(slinky, node_settings="          slurm_settings: {Weight: 2, MemSpecLimit: 4096}")
                          + k8s, "f.yaml")
    assert result.valid, [f.message for f in result.located()]
    values = yaml.safe_load(render_slurm(result.fleet)[PurePosixPath("slurm/slinky-values.yaml")])
    conf = values["nodesets"]["nvidia-hopper"]["extraConfMap"]
    assert conf["Weight"] == "2" and conf["MemSpecLimit"] == "4096"
    assert conf["Gres"] == ["gpu:h100:8"]  # fleetspec's own parameters stay
    # Owned keys stay refused in slinky mode too (slurmd(8): NodeName and Port are not supported in --conf).
    assert len(_errors(spec(slinky, node_settings="          slurm_settings: {Port: 7000}") + k8s)) == 1
    # Two node groups in one NodeSet that disagree: one NodeSet has one --conf.
    second = ("          slurm_settings: {Weight: 2}\n"
              "        - hosts: h100-[03-04]\n"
              "          gpu: {model: h100-sxm, count: 8}\n"
              "          stack: hopper\n"
              "          scheduler: slurm\n"
              "          cpus: 16\n"
              "          memory_gb: 64\n"
              "          slurm_settings: {Weight: 5}")
    errors = _errors(spec(slinky, node_settings=second) + k8s)
    assert [e.path for e in errors] == ["spec.racks[0].nodes[1].slurm_settings"], \
        [e.message for e in errors]
    assert "NodeSet 'nvidia-hopper'" in errors[0].message
