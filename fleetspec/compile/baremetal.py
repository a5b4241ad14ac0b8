"""The bare-metal part of the IR: each node's BMC, the spare pools and the ticket webhook.

A rack's ``bmc`` applies to every node group in it; a group's ``bmc`` overrides the rack's
fields one by one and merges its ``bios`` over the rack's. Each node gets its endpoint and
system with ``{host}`` replaced by its hostname. The endpoint and the webhook URL are trust
boundaries: https, or plain http only to the loopback address (an emulated BMC, a test
webhook); never a user or password in the URL (the credential is a secret reference).
Pure: findings, never I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from fleetspec.compile import ir
from fleetspec.findings import Finding, Severity
from fleetspec.node_side.hostlist import HostlistError, expand
from fleetspec.spec import model as m
from fleetspec.spec.loader import is_secret_name
from fleetspec.spec.url_credentials import query_credential

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
# Secret kinds a BMC credential may use: resolved by fleetspec at apply time. A Pulumi config
# secret is readable only inside a Pulumi program, and Redfish is driven from fleetspec.
BMC_SECRET_KINDS = ("env:", "file:", "vault:")
RULE = "baremetal"
# BIOS attributes whose names read like a password but whose registries declare an
# Enumeration, not a Password (a state or a policy, no secret): Dell R750 BiosRegistry
# (shared/redfish/mockups/dell-r750: PasswordStatus Unlocked|Locked, BootmanagerPassword
# Always|Never). Every other attribute named like a secret is refused: the registries
# declare AdminPassword, SetupPassword, SysPassword, UserPassword, OldSetupPassword,
# AddBmcUserPassword (dell-r750, nvidia-dgx-h100) as Type Password.
BIOS_NOT_SECRETS = frozenset({"PasswordStatus", "BootmanagerPassword"})


def url_problem(url: str, what: str) -> str | None:
    """Why ``url`` may not be used for ``what`` (None: it may): https, or http to loopback."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError as exc:
        return f"{what} {url} is not a URL ({exc})"
    if parts.username is not None or parts.password is not None:
        return (f"{what} carries a user or password in the URL: remove it and give the credential as a secret "
                "reference")
    if parts.scheme == "https" and host:
        return None
    if parts.scheme == "http" and host in LOOPBACK:
        return None
    return (f"{what} {url} must be https:// (plain http only to 127.0.0.1 or localhost): credentials and "
            "commands would cross the network in clear. Use an https:// URL")


def build_baremetal(body: m.FleetBody, nodes: Sequence[ir.Node], partitions: Sequence[ir.Partition],
                    findings: list[Finding]) -> ir.BareMetal | None:
    if body.baremetal is None and not any(r.bmc or any(g.bmc for g in r.nodes) for r in body.racks):
        return None
    bmcs = _bmcs(body, nodes, findings)
    spares = _spares(body, nodes, partitions, findings)
    tickets = _tickets(body, findings)
    return ir.BareMetal(tuple(bmcs), spares, tickets, _pxe(body, findings), _firmware_images(body, findings))


def _firmware_images(body: m.FleetBody, findings: list[Finding]) -> tuple[tuple[str, str, str, str], ...]:
    """The images a BMC fetches to update a component to a version. The BMC, not fleetspec,
    downloads the image, and many BMCs fetch over plain HTTP only: http to a host other than
    loopback warns (the vendor's signature, which the BMC checks, is then all that vouches for
    it); a user or password in the URL is refused (it would be stored in the BMC's task log).
    An image given as ``{url, sha256}`` is one fleetspec may push itself (Redfish
    MultipartHttpPushUri): it is fetched and checked against the SHA-256 before it is sent."""
    out = []
    images = body.baremetal.firmware_images if body.baremetal else {}
    for component, versions in sorted(images.items()):
        for version, image in sorted(versions.items()):
            uri, sha256 = image.url, image.sha256 or ""
            path = ("spec", "baremetal", "firmware_images", component, version)
            problem = url_problem(uri, f"the {component} {version} firmware image")
            credential = None if problem else query_credential(uri, is_secret_name)
            if credential:  # a presigned URL: its signature would be stored with the fleet (#41 item 8)
                findings.append(Finding(RULE, Severity.ERROR, f"the {component} {version} firmware image URL carries "
                                        f"a credential in its query ({credential}): it would be written to fleet.json, "
                                        "the state, saved plans and the BMC's task log. Serve the image where the BMC "
                                        "needs no credential in the URL", path))
                continue
            parts = urlsplit(uri) if problem else None
            if parts is not None and " must be https://" in problem and parts.scheme == "http":
                findings.append(Finding(RULE, Severity.WARNING, f"{problem.split(' must ')[0]} is served over plain "
                                        "http: the BMC fetches whatever answers there, and only the vendor's image "
                                        "signature (which the BMC checks) vouches for it. Serve it over https where "
                                        "the BMC can", path))
            elif problem:
                findings.append(Finding(RULE, Severity.ERROR, problem, path))
                continue
            out.append((component, version, uri, sha256))
    return tuple(out)


def _pxe(body: m.FleetBody, findings: list[Finding]) -> ir.PxeConfig | None:
    pxe = body.baremetal.pxe if body.baremetal else None
    if pxe is None:
        return None
    credential = query_credential(pxe.image_url, is_secret_name)
    if credential:  # every node's boot script would carry it, and fleet.json (#41 item 8)
        findings.append(Finding(RULE, Severity.ERROR, f"the golden image URL carries a credential in its query "
                                f"({credential}): it would be written to fleet.json, the state, saved plans and every "
                                "node's boot script. Serve the images where a booting node needs no credential",
                                ("spec", "baremetal", "pxe", "image_url")))
        return None
    parts = urlsplit(pxe.image_url)
    if parts.scheme == "http" and (parts.hostname or "") not in LOOPBACK:
        findings.append(Finding(RULE, Severity.WARNING, f"golden images over plain http ({pxe.image_url}): a node boots "
                                "whatever answers on the provisioning network. Use https (an iPXE built with TLS) or "
                                "keep that network isolated", ("spec", "baremetal", "pxe", "image_url")))
    return ir.PxeConfig(pxe.server, pxe.interface, pxe.dhcp_range, pxe.image_url.rstrip("/"), tuple(pxe.dns))


def _bmcs(body: m.FleetBody, nodes: Sequence[ir.Node], findings: list[Finding]) -> list[ir.NodeBmc]:
    by_group: dict[tuple[str | int, ...], list[ir.Node]] = {}
    for node in nodes:
        by_group.setdefault(node.path, []).append(node)
    out: list[ir.NodeBmc] = []
    problems: list[Finding] = []
    for r_i, rack in enumerate(body.racks):
        rack_path = ("spec", "racks", r_i)
        for g_i, group in enumerate(rack.nodes):
            if rack.bmc is None and group.bmc is None:
                continue
            group_path = rack_path + ("nodes", g_i)
            for bmc, at in ((rack.bmc, rack_path + ("bmc",)), (group.bmc, group_path + ("bmc",))):
                problems.extend(_bios_secrets(bmc, at))
            merged, origin = _merge(((rack.bmc, rack_path + ("bmc",)), (group.bmc, group_path + ("bmc",))))
            path = group_path + ("bmc",) if group.bmc else rack_path + ("bmc",)
            if not _complete(merged, origin, rack_path + ("bmc",) if rack.bmc else path, problems):
                continue
            for node in by_group.get(group_path, []):
                endpoint = str(merged["endpoint"]).replace("{host}", node.hostname)
                system = merged.get("system")
                out.append(ir.NodeBmc(node.hostname, endpoint.rstrip("/"),
                                      str(system).replace("{host}", node.hostname) if system else None,
                                      str(merged["username"]), str(merged["password"]), merged.get("ca_file"),
                                      tuple(sorted(merged["bios"].items())), path, merged.get("server_name"),
                                      _fingerprints(merged.get("fingerprint"))))
    findings.extend(dict.fromkeys(problems))  # a rack's problem once, not once per node group
    return out


Path_ = tuple[str | int, ...]


def _bios_secrets(bmc: m.Bmc | None, path: Path_) -> list[Finding]:
    """A BIOS password pinned as a literal (#41 item 8): refused at its key, its value never shown."""
    if bmc is None:
        return []
    return [Finding(RULE, Severity.ERROR, f"BIOS attribute {name} is a password: a literal here would be written to "
                    "fleet.json, the state and saved plans. fleetspec does not pin BIOS passwords: remove it, keep "
                    "the password in your secret store (a secret reference: env:, file:, vault:; docs/security.md) "
                    "and set it through the BMC (Redfish Bios.ChangePassword)", path + ("bios", name), "key")
            for name in sorted(bmc.bios) if is_secret_name(name) and name not in BIOS_NOT_SECRETS]


def _merge(layers: Sequence[tuple[m.Bmc | None, Path_]]) -> tuple[dict, dict[str, Path_]]:
    """The fields of a rack's and a group's ``bmc`` (the group's winning), and where each came from."""
    merged: dict = {"bios": {}}
    origin: dict[str, Path_] = {}
    for bmc, path in layers:
        if bmc is None:
            continue
        for key in ("endpoint", "system", "username", "password", "ca_file", "server_name", "fingerprint"):
            if getattr(bmc, key) is not None:
                merged[key] = getattr(bmc, key)
                origin[key] = path + (key,)
        merged["bios"] = {**merged["bios"], **bmc.bios}
    return merged, origin


def _fingerprints(given: list[str] | None) -> tuple[str, ...]:
    """Pinned fingerprints as lowercase hex without colons (the shape was checked by the model)."""
    out = (item.lower().removeprefix("sha256:").replace(":", "") for item in given or ())
    return tuple(dict.fromkeys(out))


def _tls_problem(merged: dict, origin: dict[str, Path_], findings: list[Finding]) -> bool:
    """A pinned fingerprint trusts one certificate whatever its CA and name: with ca_file or
    server_name beside it one of the two would silently not apply."""
    if "fingerprint" in merged and ("ca_file" in merged or "server_name" in merged):
        other = "ca_file" if "ca_file" in merged else "server_name"
        findings.append(Finding(RULE, Severity.ERROR, f"this BMC pins its certificate (fingerprint) and gives "
                                f"{other} too: give fingerprint (that certificate is trusted as it is), or ca_file "
                                "and server_name (a certificate signed by that CA, carrying that name), not both",
                                origin["fingerprint"]))
        return True
    for key in ("server_name", "fingerprint", "ca_file"):
        if key in merged and str(merged.get("endpoint", "")).startswith("http://"):
            findings.append(Finding(RULE, Severity.ERROR, f"{key} applies to a certificate, and this BMC's endpoint "
                                    f"is plain http: remove {key} or use https", origin[key]))
            return True
    return False


def _complete(merged: dict, origin: dict[str, Path_], path: Path_, findings: list[Finding]) -> bool:
    missing = [k for k in ("endpoint", "username", "password") if k not in merged]
    if missing:
        findings.append(Finding(RULE, Severity.ERROR, f"this BMC has no {', '.join(missing)} (from its rack or its "
                                "node group): fleetspec cannot reach it over Redfish. Add them", path))
        return False
    problem = url_problem(str(merged["endpoint"]).replace("{host}", "node"), "the BMC endpoint")
    if problem:
        findings.append(Finding(RULE, Severity.ERROR, problem, origin["endpoint"]))
        return False
    if not str(merged["password"]).startswith(BMC_SECRET_KINDS):
        findings.append(Finding(RULE, Severity.ERROR, "a BMC password must be an env:, file: or vault: reference: "
                                "fleetspec reads it when it talks to the BMC, and a Pulumi config secret is "
                                "readable only inside a Pulumi program. Use one of those", origin["password"]))
        return False
    return not _tls_problem(merged, origin, findings)


def _spares(body: m.FleetBody, nodes: Sequence[ir.Node], partitions: Sequence[ir.Partition],
            findings: list[Finding]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    if body.baremetal is None:
        return ()
    by_name = {n.hostname: n for n in nodes}
    by_partition = {p.name: p for p in partitions}
    taken: dict[str, str] = {}
    out = []
    for name, hostlist in sorted(body.baremetal.spares.items()):
        path = ("spec", "baremetal", "spares", name)
        partition = by_partition.get(name)
        if partition is None:
            findings.append(Finding(RULE, Severity.ERROR, f"'{name}' is not a partition of this fleet; spares join a "
                                    f"partition. Use one of: {', '.join(sorted(by_partition)) or '(none)'}", path, "key"))
            continue
        try:
            hosts = expand(hostlist)
        except HostlistError as exc:
            findings.append(Finding(RULE, Severity.ERROR, f"{exc}. Fix the hostlist", path))
            continue
        members = [by_name[h] for h in partition.nodes if h in by_name]
        good = []
        for host in hosts:
            spare = by_name.get(host)
            why = _unfit(host, spare, partition, members, taken)
            if why:
                findings.append(Finding(RULE, Severity.ERROR, why, path))
                continue
            taken[host] = name
            good.append(host)
        out.append((name, tuple(good)))
    return tuple(out)


def _unfit(host: str, spare: ir.Node | None, partition: ir.Partition, members: list[ir.Node],
           taken: dict[str, str]) -> str | None:
    if spare is None:
        return f"spare '{host}' is not a node of any rack: define it in a rack (its GPUs, stack and BMC) first"
    if host in partition.nodes:
        return (f"spare '{host}' is already in partition '{partition.name}': a spare stands outside the partition. "
                "Remove it from the pool or give it a partition of its own")
    if host in taken:
        return (f"spare '{host}' is already in the pool of '{taken[host]}': a node is a spare for one partition. "
                "Remove it from one pool")
    for member in members[:1]:
        if (spare.gpu.model, spare.gpu.count, spare.stack, spare.scheduler) != (
                member.gpu.model, member.gpu.count, member.stack, member.scheduler):
            return (f"spare '{host}' ({spare.gpu.count}x {spare.gpu.model}, stack {spare.stack}, {spare.scheduler}) "
                    f"does not match partition '{partition.name}' ({member.gpu.count}x {member.gpu.model}, stack "
                    f"{member.stack}, {member.scheduler}): a spare must be the same model and tuple. "
                    "Pick a matching node")
    return None


def _tickets(body: m.FleetBody, findings: list[Finding]) -> ir.TicketWebhook | None:
    hook = body.baremetal.tickets if body.baremetal else None
    if hook is None:
        return None
    path = ("spec", "baremetal", "tickets", "url")
    problem = url_problem(hook.url, "the ticket webhook")
    credential = None if problem else query_credential(hook.url, is_secret_name)
    if credential:
        problem = (f"the ticket webhook URL carries a credential in its query ({credential}): it would be written to "
                   "fleet.json, the state and saved plans. Give the credential as tickets.token (a secret reference: "
                   "env:, file: or vault:, sent as 'Authorization: Bearer ...') and use an endpoint that takes it")
    if problem:
        findings.append(Finding(RULE, Severity.ERROR, problem, path))
        return None
    if hook.token is not None and not hook.token.startswith(BMC_SECRET_KINDS):
        findings.append(Finding(RULE, Severity.ERROR, "tickets.token must be an env:, file: or vault: reference: use one of those",
                                ("spec", "baremetal", "tickets", "token")))
        return None
    return ir.TicketWebhook(hook.url, hook.token, hook.timeout)
