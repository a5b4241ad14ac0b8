"""The v1alpha1 fleet spec: what the user writes, validated by pydantic.

This is the public contract (DESIGN.md, "The spec language"). Every model forbids
unknown keys. Names that end up in hostnames, file paths, Slurm configs and
Kubernetes objects are checked against strict patterns here, at the boundary.
Versions must be YAML strings: an unquoted ``12.10`` is the float 12.1, and pydantic's
strict ``str`` refuses it so the error layer can say "quote this version".

No ``from __future__ import annotations`` here: pydantic would evaluate every field's
annotation from a string at each start (startup time); the one forward reference is quoted.
"""

import os
import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import core_schema

from fleetspec.node_side.faults import FAULTS
from fleetspec.slurm_syntax import slurm_time_problem


class Prebuilt:
    """A strict ``str``, ``int`` or ``bool`` with constraints: a type whose core schema is made once.

    ``strict(str, pattern=P, max_length=63)`` validates exactly as pydantic's
    ``Annotated[StrictStr, Field(pattern=P, max_length=63)]``: the same core schema, so the
    same checks and errors, and the same JSON schema (tests/spec/test_model_build.py compares
    each one used here with what pydantic builds from that spelling). Pydantic only no longer
    works the schema out again at each of the ~100 places the spec uses one (callgrind,
    building the spec model: 125 M -> 74 M instructions). It is a type, not ``Annotated``
    metadata, because pydantic takes a type's ``__get_pydantic_core_schema__`` as it is but
    runs each use of ``Annotated`` metadata through its metadata machinery, a runtime-protocol
    ``isinstance`` included, which is slow on Python 3.11 (74 M -> 58 M). Never instantiated:
    the value validates to the plain ``str``, ``int`` or ``bool``.
    """

    __slots__ = ()
    kind: ClassVar[type]
    constraints: ClassVar[dict[str, Any]]
    schema: ClassVar[core_schema.CoreSchema]

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        return dict(cls.schema)  # type: ignore[return-value]  # a copy: pydantic may add to it


_SCHEMAS = {str: core_schema.str_schema, int: core_schema.int_schema, bool: core_schema.bool_schema,
            float: core_schema.float_schema}


def strict(kind: type, **constraints: Any) -> Any:
    """``Annotated[StrictStr, Field(**constraints)]`` (StrictInt, StrictBool), prebuilt."""
    schema = _SCHEMAS[kind](strict=True, **constraints)
    return type(f"Strict{kind.__name__.capitalize()}", (Prebuilt,),
                {"__slots__": (), "kind": kind, "constraints": constraints, "schema": schema})


StrictStr, StrictInt, StrictBool = strict(str), strict(int), strict(bool)

DNS_LABEL = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
# Versions: dotted numbers with an optional leading "v"; nothing a shell or a template
# could misread.
VERSION = r"^v?[0-9]+(\.[0-9]+){0,3}$"

Name = strict(str, pattern=DNS_LABEL, max_length=63)
# A Slurm node feature as sites spell them (ib, 2.4GHz, gpu_a100, CPU_GEN:SKX): letters,
# digits and _ . : + -. Not the characters Slurm's --constraint syntax gives a meaning
# (& | , ! * [ ] ( )), nor anything a shell, YAML or slurm.conf line could misread. Only
# slurm.conf carries node features (Kubernetes labels are fleetspec's own).
SLURM_FEATURE = r"^[A-Za-z0-9_][A-Za-z0-9_.:+-]{0,127}$"
SlurmFeature = strict(str, pattern=SLURM_FEATURE, max_length=128)
# A partition the site names in slurm.partitions: Slurm partition names are case-sensitive
# and sites use upper case and '_' (CPU, rocsLong, gpu_long). Those partitions are Slurm's
# only (never a Kubernetes object); the compiler refuses two that differ only in case or
# '-'/'_' (one Ansible group name).
SLURM_PARTITION = r"^[A-Za-z0-9]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$"
SlurmPartitionName = strict(str, pattern=SLURM_PARTITION, max_length=63)
Version = strict(str, pattern=VERSION, max_length=32)
# A site's ClusterName kept as written (HAL9000_v2): letters, digits, '_' and '-', at most 40
# characters (slurm.conf(5) of 22.05.8: "any upper case letters in the name will be silently
# mapped to lower case ... must be 40 characters or less" for MySQL/MariaDB table names).
SLURM_CLUSTER = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,39}$"
SlurmClusterName = strict(str, pattern=SLURM_CLUSTER, max_length=40)
Hostlist = strict(str, min_length=1, max_length=4096)
PositiveInt = strict(int, ge=1)
# A site setting's value (fleetspec/site): written as given; a list is comma-joined.
# Keys and values are checked against Slurm's parameter lists in fleetspec.site.slurm.
SettingValue = StrictStr | StrictInt | StrictBool | list[StrictStr | StrictInt]
Settings = dict[strict(str, min_length=1, max_length=128), SettingValue]


class _Model(BaseModel):
    # defer_build: pydantic builds one validator, for FleetSpec, when a spec is first
    # validated, instead of one per model at import (each nesting the ones below it).
    # Default factories that make models use `model_construct`: `Model()` would build
    # that model's own validator (its schema a second time, beside FleetSpec's) only to
    # return what `model_construct` returns, as pydantic validates no defaults
    # (tests/spec/test_model_defaults.py checks that each one is what `Model()` makes).
    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=False, defer_build=True)

    @classmethod
    def model_rebuild(cls, **kwargs: Any) -> bool | None:
        """Every (deferred) build of a spec model comes here; it runs with pydantic plugins
        disabled, as Typer builds its own adapters. The spec model is fleetspec's internal
        input check, not an API for instrumentation (logfire and the like), and looking for
        plugins reads the metadata of every installed distribution (5-10 ms at each start
        with this machine's ~170). Pydantic reads ``PYDANTIC_DISABLE_PLUGINS`` when a validator
        is built (pydantic/plugin/_loader.py; https://github.com/pydantic/pydantic/pull/8767);
        it is set only while the build runs and restored after, so models outside fleetspec and
        child processes see the environment as it was. Validation itself is unchanged."""
        depth = kwargs.get("_parent_namespace_depth", 2)
        if depth > 0:  # the namespace pydantic looks up is the caller's, one frame further out now
            kwargs["_parent_namespace_depth"] = depth + 1
        previous = os.environ.get(_NO_PLUGINS)
        os.environ[_NO_PLUGINS] = "1"
        try:
            return super().model_rebuild(**kwargs)
        finally:
            if previous is None:
                del os.environ[_NO_PLUGINS]
            else:
                os.environ[_NO_PLUGINS] = previous


_NO_PLUGINS = "PYDANTIC_DISABLE_PLUGINS"


class BuiltWhenGiven:
    """``Annotated[Section, WHEN_GIVEN]``: a section most specs leave out (kubernetes,
    baremetal, a BMC, ...) is validated by the section model's own validator, built the
    first time a spec gives the section, instead of inside ``FleetSpec``'s, which every
    start builds (with them all in it, over a third of that build: 11.8 ms, now 7.5 ms).
    The checks and errors are the section model's own: pydantic-core merges the line
    errors of a ValidationError raised by a validator function into the outer one, each at
    its location below the field (``spec.baremetal.pxe.server``), in the same order.
    tests/spec/test_model_build.py compares the errors and the JSON schema with the
    section built in place. The JSON schema is the section model's, as before."""

    __slots__ = ()

    def __get_pydantic_core_schema__(self, source: type[BaseModel], handler: Any) -> core_schema.CoreSchema:
        def validate(value: Any) -> Any:
            return source.__pydantic_validator__.validate_python(value)

        def json_schema(_schema: Any, json_handler: Any) -> Any:
            # generate_inner, not the handler: it files the model under $defs and gives its $ref
            return json_handler.generate_json_schema.generate_inner(source.__pydantic_core_schema__)

        # A function over a schema with a ref, as a model's is: the field gets no title of
        # its own in the JSON schema (pydantic titles only fields whose schema has no ref).
        return core_schema.no_info_before_validator_function(
            validate, core_schema.any_schema(ref=f"{source.__module__}.{source.__qualname__}:when-given"),
            metadata={"pydantic_js_annotation_functions": [json_schema]})


WHEN_GIVEN = BuiltWhenGiven()


def empty_list() -> list[Any]:
    """The default factory of list fields, where ``list`` itself would cost a start 3 ms:
    pydantic reads each factory's signature, and for ``list`` (a builtin) that means
    tokenizing its text signature, and compiling tokenize's regular expressions first."""
    return []


class Metadata(_Model):
    name: Name


# A firmware version as its vendor writes it (VBIOS 96.00.74.00.01, BMC 24.10-24): letters,
# digits, dots, dashes and underscores; nothing a shell, template or URL could misread.
FirmwareVersion = strict(str, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Firmware(_Model):
    """The firmware a stack's nodes run (docs/bare-metal.md). Each is compared with what the
    node or its BMC reports; versions the catalog's release facts do not confirm warn."""

    vbios: FirmwareVersion | None = Field(default=None, description="GPU VBIOS (nvidia-smi's vbios_version)")
    nvswitch: FirmwareVersion | None = None
    connectx: FirmwareVersion | None = Field(default=None, description="ConnectX/BlueField firmware (fw_ver in sysfs)")
    bmc: FirmwareVersion | None = None
    bios: FirmwareVersion | None = Field(default=None, description="system BIOS/UEFI (Redfish BiosVersion)")


# A file on the node, by absolute path: letters, digits and . _ + - only, no '.'/'..'
# segments (nothing a shell, a DKMS framework file or a template could misread).
NODE_PATH = r"^(/[A-Za-z0-9._+-]+)+$"


class SecureBoot(_Model):
    """The site's Machine Owner Key that DKMS signs the driver's modules with on a Secure
    Boot node (docs/security.md, "Secure Boot signing key"). Both are paths on the node,
    provisioned by the site: the private key never passes through fleetspec."""

    mok_certificate: strict(str, pattern=NODE_PATH, max_length=1024) = Field(
        description="the MOK's X.509 certificate (DER, as mokutil --import takes it) on the node, e.g. "
                    "/var/lib/shim-signed/mok/MOK.der")
    mok_signing_key: strict(str, pattern=NODE_PATH, max_length=1024) = Field(
        description="the path of the MOK's private key on the node, e.g. /var/lib/shim-signed/mok/MOK.priv; "
                    "never the key itself")

    @field_validator("mok_certificate", "mok_signing_key")
    @classmethod
    def _no_dot_segments(cls, value: str) -> str:
        if any(part in (".", "..") for part in value.split("/")):
            raise ValueError("write the path without '.' or '..' segments (DKMS reads it as written)")
        return value

    @model_validator(mode="after")
    def _two_files(self) -> "SecureBoot":
        if self.mok_certificate == self.mok_signing_key:
            raise ValueError("mok_certificate and mok_signing_key name the same file; the certificate (DER) "
                             "and the private key are two files")
        return self


class Stack(_Model):
    """A pinned tuple. NVIDIA: driver, cuda, cudnn (optional), nccl, dcgm (optional).
    AMD: rocm, rccl (optional: the one ROCm bundles), amdgpu (optional)."""

    driver: Version | None = None
    cuda: Version | None = None
    cudnn: Version | None = None
    nccl: Version | None = None
    dcgm: Version | None = Field(
        default=None, description="NVIDIA DCGM 4 release for the nodes' host engine (e.g. 4.5.2); none: no DCGM")
    amdgpu: Version | None = None
    rocm: Version | None = None
    rccl: Version | None = None
    firmware: Annotated[Firmware, WHEN_GIVEN] | None = None
    secure_boot: Annotated[SecureBoot, WHEN_GIVEN] | None = Field(
        default=None, description="the site's Machine Owner Key DKMS signs the driver's modules with on Secure Boot "
                                  "nodes (paths on the node); none: a Secure Boot node needs DKMS's own key enrolled")


class Fabric(_Model):
    type: Literal["infiniband", "roce", "ethernet"]
    spines: list[Name] = Field(default_factory=empty_list)


# A GRES type as Slurm takes it (gres.conf(5) Type=: the site's own name, `volta`,
# `tesla_v100-sxm2-32gb`, as NVML autodetection spells it); no `:` `,` `(` or blanks.
GRES_TYPE = r"^[a-z0-9][a-z0-9_.-]{0,62}$"


# MIG (docs/mig.md): a mig-parted named geometry, and one instance profile as nvidia-smi
# names it; which ones a model has is catalog data (fleetspec/catalog/data/mig.yaml).
MIG_NAME = r"^all-([1-8]g\.[0-9]{1,3}gb(\.me)?|balanced)$"
MigName = strict(str, pattern=MIG_NAME, max_length=32)
MigProfile = strict(str, pattern=r"^[1-8]g\.[0-9]{1,3}gb(\+me)?$", max_length=16)


class GpuSharing(_Model):
    """GPUs shared without MIG, on Kubernetes: the NVIDIA device plugin's time-slicing
    (docs/mig.md). Slurm shares GPUs with other_gres (mps, shard)."""

    time_slicing: strict(int, ge=2, le=64) = Field(  # type: ignore[valid-type]
        description="replicas of each GPU the device plugin advertises (nvidia.com/gpu), time-sliced")


class GpuRef(_Model):
    model: strict(str, min_length=1, max_length=64)
    count: strict(int, ge=1, le=64)
    gres: strict(str, pattern=GRES_TYPE) | None = Field(
        default=None, description="the Slurm GRES type, where the site names it otherwise than the model's "
                                  "(gpu:volta for v100): jobs' --gres and accounting keep the site's name")
    typed: StrictBool = Field(
        default=True, description="false: untyped Slurm GRES (Gres=gpu:8, gres.conf without Type=), as an "
                                  "adopted cluster declares them")
    mig: MigName | dict[MigProfile, strict(int, ge=1, le=7)] | None = Field(  # type: ignore[valid-type]
        default=None,
        json_schema_extra={"anyOf": [{"type": "string", "pattern": MIG_NAME},
                                     {"type": "object", "maxProperties": 8,
                                      "additionalProperties": {"type": "integer", "minimum": 1, "maximum": 7}},
                                     {"type": "null"}]},
        description="MIG instances on every GPU of the group: a mig-parted geometry (all-1g.10gb, "
                    "all-balanced) or the instances of one GPU ({1g.10gb: 2, 2g.20gb: 1, 3g.40gb: 1}); "
                    "checked against the model's MIG profiles (docs/mig.md)")
    sharing: GpuSharing | None = Field(
        default=None, description="GPU sharing without MIG on Kubernetes: {time_slicing: REPLICAS} (docs/mig.md)")

    @model_validator(mode="after")
    def _one_type(self) -> "GpuRef":
        if not self.typed and self.gres is not None:
            raise ValueError("give gres (the Slurm type) or typed: false (untyped GRES), not both")
        return self


# Unbounded repeats plus max_length, not {1,4096}: a counted repeat makes the regex
# engine build a large automaton (about 0.2 s and 17 MB at every start).
# ``vault:`` is the old spelling of ``ansible-vault:`` (a deprecation warning, #28 item 10).
SECRET_REF = (r"^(env:[A-Za-z_][A-Za-z0-9_]*|file:[^\x00\n]+|(ansible-vault|vault|sops):[^\x00\n#]+#[A-Za-z0-9_]{1,128}"
              r"|hashicorp-vault:[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+#[A-Za-z0-9_.-]{1,128}|pulumi:[A-Za-z0-9_.:-]{1,128})$")
SecretRef = strict(str, pattern=SECRET_REF, max_length=4240)
# A BMC's Redfish service root: scheme, host (``{host}``: the node's hostname) and port, no
# user, path or query (fleetspec/compile/baremetal.py allows http only to loopback).
BmcEndpoint = strict(str, pattern=r"^[a-z]+://[A-Za-z0-9.{}_-]+(:[0-9]{1,5})?/?$", max_length=512)
BiosValue = StrictStr | StrictInt | StrictBool
# A certificate's SHA-256 fingerprint as ``openssl x509 -noout -fingerprint -sha256`` prints it
# (AB:CD:... after "sha256 Fingerprint="), or as 64 hex digits; "sha256:" may lead.
CERT_FINGERPRINT = r"^(sha256:|SHA256:)?([0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){31}|[0-9A-Fa-f]{64})$"
CertFingerprint = strict(str, pattern=CERT_FINGERPRINT, max_length=102)
# The name a BMC's certificate carries (a DNS name; a vendor default such as AMI).
TlsServerName = strict(str, pattern=r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$", max_length=253)


class Bmc(_Model):
    """A node's baseboard management controller over Redfish, per rack or node group (a
    group's fields override its rack's; ``bios`` merges, the group's keys winning)."""

    endpoint: BmcEndpoint | None = Field(
        default=None, description="https://HOST[:PORT]; {host} is the node's hostname (https://{host}-bmc.mgmt)")
    system: strict(str, pattern=r"^[A-Za-z0-9{}._-]+$", max_length=128) | None = Field(
        default=None, description="the Redfish System's Id or Name; {host} is the node's hostname (default: "
                                  "the service's only system)")
    username: strict(str, pattern=r"^[A-Za-z0-9._@-]+$", max_length=64) | None = None
    password: SecretRef | None = Field(default=None, description="a secret reference: env:, file:, ansible-vault:, hashicorp-vault:, sops:")
    ca_file: strict(str, pattern=r"^[^\x00\n]+$", max_length=1024) | None = Field(
        default=None, description="the CA bundle that signed the BMCs' certificates, or a certificate itself "
                                  "(relative to the spec)")
    server_name: TlsServerName | None = Field(
        default=None, description="the name the BMC's certificate carries where it is not the endpoint's host "
                                  "(a vendor default CN=AMI reached by address): checked instead of the host, "
                                  "its CN only when the certificate has no subjectAltName")
    fingerprint: list[CertFingerprint] | None = Field(
        default=None, min_length=1, max_length=64,
        json_schema_extra={"anyOf": [{"type": "string", "pattern": CERT_FINGERPRINT},
                                     {"type": "array", "items": {"type": "string", "pattern": CERT_FINGERPRINT},
                                      "minItems": 1, "maxItems": 64}]},
        description="the SHA-256 fingerprint of the BMC's certificate itself (openssl x509 -fingerprint -sha256), "
                    "or a list of them: that certificate is trusted, no CA or name checked; instead of ca_file "
                    "and server_name")
    bios: dict[strict(str, pattern=r"^[A-Za-z][A-Za-z0-9_.]*$", max_length=128), BiosValue] = Field(
        default_factory=dict, description="BIOS attributes the site pins, checked against the BMC's attribute "
                                          "registry; a change needs a reboot")

    @field_validator("fingerprint", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value  # one fingerprint, or a list (rotation, a rack's BMCs)


# A node's Slurm State as slurm.conf(5) writes it on a NodeName line (22.05.8, Debian's
# slurm-client 22.05.8-4+deb12u3, /usr/share/man/man5/slurm.conf.5.gz: "Acceptable values are
# CLOUD, DOWN, DRAIN, FAIL, FAILING, FUTURE and UNKNOWN"; UNKNOWN is what fleetspec writes
# for a node in service). Its Reason is one quoted string ("Use quotes to enclose a reason
# having more than one word"): no quote, '#' (Slurm ends the line there), backslash or
# control character can be in it.
SLURM_NODE_REASON = r'^[^"#\\\x00-\x1f\x7f]{1,256}$'


class SlurmNodeState(_Model):
    """A node the site keeps out of service (or in the cloud, or for the future), as its
    NodeName line says: an adopted cluster's drained and down nodes stay so after the
    first apply, whatever slurmctld's saved state holds."""

    state: Literal["CLOUD", "DOWN", "DRAIN", "FAIL", "FUTURE", "IDLE"]
    reason: strict(str, pattern=SLURM_NODE_REASON, max_length=256) | None = None  # type: ignore[valid-type]


class NodeGroup(_Model):
    hosts: Hostlist
    gpu: GpuRef
    stack: Name
    scheduler: Literal["slurm", "kubernetes"]
    partition: Name | None = Field(
        default=None, description="put these nodes in a named partition instead of the generated one"
    )
    cpus: PositiveInt | None = None
    sockets: PositiveInt | None = None
    cores_per_socket: PositiveInt | None = None
    threads_per_core: PositiveInt | None = None
    memory_gb: PositiveInt | None = None
    real_memory_mb: PositiveInt | None = Field(
        default=None, description="Slurm RealMemory exactly as written (an imported cluster); instead of memory_gb")
    other_gres: dict[Literal["mps", "shard"], strict(int, ge=1, le=1_000_000)] = Field(
        default_factory=dict, description="Slurm GPU-sharing GRES per node (mps: 400, shard: 16), split evenly over "
                                          "the GPUs in gres.conf")
    other_gpus: list[GpuRef] = Field(
        default_factory=empty_list, max_length=8,
        description="more GPU models in the same nodes (gpu:a100:2,gpu:t4:1): one Slurm GRES type each, after "
                    "`gpu` in device order; `gpu` (the primary model) names the generated partition and the "
                    "tuple rules' model; same vendor only (one NCCL or RCCL stack per node); native Slurm only")
    features: list[SlurmFeature] = Field(default_factory=empty_list, description="Slurm node features as written")
    bmc: Annotated[Bmc, WHEN_GIVEN] | None = None
    slurm_settings: Settings = Field(
        default_factory=dict, description="site NodeName parameters for these nodes (docs/site-settings.md)")
    slurm_state: SlurmNodeState | None = Field(
        default=None, description="Slurm State and Reason written on these nodes' NodeName line (an adopted "
                                  "cluster's drained or down nodes: import); without it, State=UNKNOWN")

    @model_validator(mode="after")
    def _one_memory(self) -> "NodeGroup":
        if self.memory_gb is not None and self.real_memory_mb is not None:
            raise ValueError("give memory_gb (installed memory; RealMemory is derived) or real_memory_mb "
                             "(RealMemory as written), not both")
        for name, count in self.other_gres.items():
            if count % self.gpu.count:
                raise ValueError(f"other_gres {name}: {count} does not split evenly over {self.gpu.count} GPUs; "
                                 "gres.conf(5) gives each GPU's device file its own Count. Give a multiple of "
                                 f"{self.gpu.count}")
        return self


# A GPU the site schedules that fleetspec models no stack for (an Intel iGPU: gpu:iris:1),
# as slurm.conf(5) writes a typed GRES: gpu:TYPE:COUNT. Only gpu: other GRES names need
# gres.conf lines fleetspec does not write, and mps/shard share GPUs it manages.
SITE_GRES = r"^gpu:[a-z0-9][a-z0-9_.-]{0,62}:[1-9][0-9]{0,5}$"


class CpuNodeGroup(_Model):
    """Nodes without GPUs that fleetspec manages (login, service and CPU partitions): no
    stack, no GPU roles, never in a generated GPU partition; in Slurm only through
    ``slurm.partitions``. ``site_gres`` carries a GPU the site schedules that the catalog
    cannot model, as the site wrote it."""

    hosts: Hostlist
    scheduler: Literal["slurm"] = "slurm"
    cpus: PositiveInt | None = None
    sockets: PositiveInt | None = None
    cores_per_socket: PositiveInt | None = None
    threads_per_core: PositiveInt | None = None
    memory_gb: PositiveInt | None = None
    real_memory_mb: PositiveInt | None = Field(default=None, description="Slurm RealMemory as written")
    features: list[SlurmFeature] = Field(default_factory=empty_list, description="Slurm node features as written")
    slurm_settings: Settings = Field(
        default_factory=dict, description="site NodeName parameters for these nodes (docs/site-settings.md)")
    slurm_state: SlurmNodeState | None = Field(
        default=None, description="Slurm State and Reason written on these nodes' NodeName line (an adopted "
                                  "cluster's drained or down nodes: import); without it, State=UNKNOWN")
    site_gres: list[strict(str, pattern=SITE_GRES)] = Field(  # type: ignore[valid-type]
        default_factory=empty_list, max_length=8,
        description="GPUs Slurm schedules here that no catalog model describes (gpu:TYPE:COUNT, an Intel iGPU: "
                    "gpu:iris:1): written on the NodeName line as is; fleetspec installs and verifies no stack "
                    "for them")

    @model_validator(mode="after")
    def _one_memory(self) -> "CpuNodeGroup":
        if self.memory_gb is not None and self.real_memory_mb is not None:
            raise ValueError("give memory_gb (installed memory; RealMemory is derived) or real_memory_mb "
                             "(RealMemory as written), not both")
        return self


class Rack(_Model):
    name: Name
    leaf: Name | None = None
    nvlink_domain: Literal["rack", "node"] = Field(
        default="node", description="'rack': the whole rack is one NVLink domain (NVL72-class)"
    )
    bmc: Annotated[Bmc, WHEN_GIVEN] | None = None
    nodes: list[NodeGroup] = Field(default_factory=empty_list)
    cpu_nodes: list[CpuNodeGroup] = Field(
        default_factory=empty_list, description="node groups without GPUs (login, service, CPU partitions)")

    @model_validator(mode="after")
    def _has_nodes(self) -> "Rack":
        if not self.nodes and not self.cpu_nodes:
            raise ValueError(f"rack '{self.name}' has no node groups: add 'nodes' (GPU nodes) or 'cpu_nodes'")
        return self


class Accounting(_Model):
    host: strict(str, pattern=r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$", max_length=63) = Field(
        description="the slurmdbd host (a hostname: DNS ignores its case, Slurm keeps it)")


class SlurmPartition(_Model):
    nodes: Hostlist | None = Field(default=None, description="a hostlist: makes this an extra partition")
    default: StrictBool = False
    max_time: StrictStr | None = None
    state: Literal["UP", "DOWN", "DRAIN", "INACTIVE"] | None = None
    allow_mixed_generations: StrictBool = False
    settings: Settings = Field(default_factory=dict, description="site PartitionName parameters")

    @field_validator("max_time")
    @classmethod
    def _slurm_time(cls, value: str | None) -> str | None:
        problem = slurm_time_problem(value) if value is not None else None
        if problem:
            raise ValueError(problem)
        return value


class Pyxis(_Model):
    """Enroot and Pyxis releases for ``containers: pyxis`` (packages from the site's repository)."""

    enroot: Version
    pyxis: Version


Ipv4Cidr = strict(str, pattern=r"^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}"
                  r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])/([1-9]|[12][0-9]|3[0-2])$")


class Slinky(_Model):
    version: Version = "1.2.1"
    # Slinky's slurmdbd runs in a pod and reaches the accounting host's MariaDB over the
    # network: its database user is made for these networks only, never for any host ('%').
    database_clients: list[Ipv4Cidr] = Field(
        default_factory=empty_list, max_length=16,
        description="CIDRs slurmdbd pods connect to the accounting database from: the pod "
                    "network, or the nodes' addresses where pod traffic leaving the cluster is "
                    "masqueraded (/1 to /32)")

    @field_validator("database_clients")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        import ipaddress

        for cidr in value:
            net = ipaddress.IPv4Network(cidr, strict=False)
            if str(net) != cidr:
                raise ValueError(f"'{cidr}' has host bits set: write the network, {net}")
        return value


# An absolute path with nothing a config file, shell or template could misread.
AbsolutePath = strict(str, pattern=r"^(/[A-Za-z0-9._-]+)+/?$", max_length=1024)
# Directories the Slurm role must never create or chown as slurmctld's state: system
# trees (and anything under them), and the shared parents every service lives in.
SYSTEM_TREES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/dev", "/proc",
                "/sys", "/run", "/root", "/var/run", "/var/lib/dpkg", "/var/lib/apt", "/var/cache/apt")
SHARED_PARENTS = ("/", "/var", "/var/lib", "/var/spool", "/var/log", "/var/cache", "/var/tmp", "/tmp", "/home",
                  "/srv", "/opt", "/mnt", "/media", "/usr/local", "/nfs", "/shared", "/scratch")


def state_path_problem(path: str) -> str | None:
    """None when ``path`` may hold slurmctld's state (the role creates and chowns it), else why not."""
    parts = path.split("/")[1:]
    if parts and parts[-1] == "":
        parts = parts[:-1]
    if any(part in (".", "..") for part in parts):
        return f"'{path}' has '.' or '..' segments: write the directory's plain absolute path"
    clean = "/" + "/".join(parts)
    for tree in SYSTEM_TREES:
        if clean == tree or clean.startswith(tree + "/"):
            return (f"'{path}' is inside {tree}, a system directory: the Slurm role would create it and give it "
                    "to the slurm user. Use a directory of its own, like /var/spool/slurmctld")
    if clean in SHARED_PARENTS:
        return (f"'{path}' is a directory other services share: the Slurm role would give it to the slurm user. "
                "Use a directory of its own below it, like /var/spool/slurmctld")
    return None
# Above Debian's dynamic ranges (100-999 system, 1000-59999 users): 60000-64999 is
# allocated centrally by Debian and never handed out by adduser. Debian's own slurm
# package pins slurm to 64030; munge gets the next id.
ServiceId = strict(int, ge=1, le=4294967293)


class ServiceAccount(_Model):
    """A daemon account's fixed ids: the same on every host and on shared storage."""

    uid: ServiceId
    gid: ServiceId


class SlurmUsers(_Model):
    # Validated instances, not `model_construct` (see `_Model`): the JSON schema writes
    # these defaults out through ServiceAccount's serializer, which only a build makes.
    slurm: ServiceAccount = ServiceAccount(uid=64030, gid=64030)
    munge: ServiceAccount = ServiceAccount(uid=64031, gid=64031)


# A login or group name as Debian's adduser accepts it (NAME_REGEX, adduser.conf(5)), and
# as slurmdbd keeps it: lower case (sacctmgr(1): "The contents of Slurm's database are
# maintained in lower case").
UnixName = strict(str, pattern=r"^[a-z_][a-z0-9_-]*$", max_length=32)


class SlurmTenant(_Model):
    """A tenant on Slurm: an account in slurmdbd (sacctmgr), its users, and a GPU quota per
    partition or GRES type that the account's jobs together never exceed (GrpTRES)."""

    name: Name
    users: list[UnixName] = Field(default_factory=empty_list, description="login names: the account's users")
    groups: list[UnixName] = Field(
        default_factory=empty_list, description="site Unix groups whose members become users (read on the controller at apply)")
    quota: dict[Name, strict(int, ge=0, le=1_000_000)] = Field(
        default_factory=dict, description="partition or GRES type -> GPUs (GrpTRES=gres/gpu:<type>=N); "
                                          "a GPU type not named is 0")
    fairshare: strict(int, ge=1, le=1_000_000) = Field(default=1, description="the account's fair-share shares")


# Where a node fetches its partition's bundle (#30 item 2): an https:// mirror directory,
# file:// or an absolute path (shared storage). Plain http is refused: the signature keeps
# the bundle honest, but not private, and nothing here needs a clear-text fetch.
_BUNDLE_SOURCE = re.compile(r"^(https://[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?|file://)?"
                            r"(/[A-Za-z0-9._-]+)+/?$")


class SlurmConverge(_Model):
    """Slurm nodes converge themselves at boot from their partition's signed bundle
    (``apply --engine slurm-native``, docs/scale.md): the ``fleetspec_converge`` role installs
    the converge unit, this public key as the node's only allowed bundle signer, where the
    node fetches its bundle and where it writes its result."""

    bundles: strict(str, max_length=1024) = Field(description="directory the nodes fetch <fleet>-<partition>.tar.gz and its .sig "
                                              "from: https://mirror/dir, file:///dir or /shared/dir (apply's "
                                              "--bundle-dir publishes there)")
    public_key: StrictStr = Field(description="the bundle signing key's public half, one OpenSSH line "
                                              "(ssh-ed25519 AAAA... comment): the private half is apply's --bundle-key")
    results: AbsolutePath = Field(default="/var/lib/fleetspec/results",
                                  description="directory each node writes HOST.json into (apply's --results reads "
                                              "it: shared storage on a fleet)")

    @field_validator("bundles")
    @classmethod
    def _bundle_source(cls, value: str) -> str:
        if not _BUNDLE_SOURCE.match(value):
            raise ValueError(f"'{value}' is not a bundle location: write an https://host/dir URL, file:///dir or "
                             "an absolute /dir (letters, digits and ._- in its names; plain http is refused)")
        return cls._plain_path(value)

    @field_validator("results")
    @classmethod
    def _plain_path(cls, value: str) -> str:
        if any(part in (".", "..") for part in value.split("/")):
            raise ValueError(f"'{value}' has '.' or '..' segments: write the plain location")
        return value

    @field_validator("public_key")
    @classmethod
    def _public_key(cls, value: str) -> str:
        from fleetspec.ssh_keys import public_key_problem  # here: only a spec with converge pays for it

        problem = public_key_problem(value)
        if problem:
            raise ValueError(problem)
        return value


# fleetspec's defaults an adopted cluster declines (docs/import.md, rule adopted-declines-default).
ADOPTED_DEFAULTS = ("default-time", "billing", "per-gpu-defaults", "generated-partitions", "node-features")
SLURM_KEY = r"^[A-Za-z][A-Za-z0-9]{0,63}$"


class SlurmAdopted(_Model):
    """What an adopted cluster keeps of its own where fleetspec would decide otherwise
    (`fleetspec import slurm` writes it; docs/import.md), so that the first plan changes
    nothing. Every entry is a proposal declined, and validate says so (rules
    adopted-site-value, adopted-declines-default, adopted-gres-conf); deleting an entry adopts
    fleetspec's choice, which then plans as a change with its disruption."""

    conf: dict[strict(str, pattern=SLURM_KEY), SettingValue | None] = Field(
        default_factory=dict, description="slurm.conf keys at the site's value where fleetspec would write another "
                                          "(SelectTypeParameters: CR_Core); null: the site leaves the key to Slurm's "
                                          "default, so fleetspec writes none")
    declines: list[Literal[ADOPTED_DEFAULTS]] = Field(  # type: ignore[valid-type]
        default_factory=empty_list, description="fleetspec defaults not applied: " + ", ".join(ADOPTED_DEFAULTS))
    gres_conf: list[strict(str, max_length=4096)] | None = Field(
        default=None, max_length=100_000, description="gres.conf as the site wrote it, line by line ([]: the site "
                                                      "wrote none); instead of fleetspec's device files and bindings")
    topology_conf: list[strict(str, max_length=65536)] | None = Field(
        default=None, max_length=100_000, description="topology.conf as the site wrote it, line by line; instead "
                                                      "of the tree fleetspec draws from racks and spines")
    cgroup_conf: list[strict(str, max_length=4096)] | None = Field(
        default=None, max_length=1000, description="cgroup.conf as the site wrote it, one Key=value a line; instead "
                                                   "of fleetspec's confinement (ConstrainCores/RAMSpace/Devices)")
    slurmdbd_conf: list[strict(str, max_length=4096)] | None = Field(
        default=None, max_length=1000, description="slurmdbd.conf as the site wrote it, one Key=value a line, "
                                                   "StoragePass only as the secret reference "
                                                   "@@secret:slurmdbd_password@@; instead of fleetspec's")


class Slurm(_Model):
    version: Version
    mode: Literal["native", "slinky"] = "native"
    controllers: Hostlist
    cluster_name: SlurmClusterName | None = Field(
        default=None, description="ClusterName as the site wrote it (HAL9000_v2), where it is no DNS label; "
                                  "default metadata.name. slurmctld and slurmdbd see it lower-cased; in Slinky "
                                  "mode the slurm chart's clusterName (the Controller's spec.clusterName)")
    accounting: Accounting | None = None
    containers: Literal["none", "pyxis"] = "none"
    pyxis: Pyxis | None = None
    partitions: dict[SlurmPartitionName, SlurmPartition] = Field(default_factory=dict)
    slinky: Slinky | None = None
    state_save_location: AbsolutePath = Field(
        default="/var/spool/slurmctld", description="slurmctld state; shared storage with 2+ controllers"
    )
    gres_autodetect: StrictBool = Field(
        default=False, description="AutoDetect=nvml/rsmi in gres.conf: needs a Slurm built with the vendor plugin"
    )
    gpu_billing_weights: dict[Name, strict(float, gt=0, le=1000, allow_inf_nan=False)] = Field(
        default_factory=dict,
        description="fair-share billing units per GPU by GRES type (h100: 1, h200: 1.4); default 1 per GPU")
    users: SlurmUsers = Field(default_factory=SlurmUsers.model_construct)
    settings: Settings = Field(default_factory=dict, description="site slurm.conf parameters")
    cgroup_settings: Settings = Field(default_factory=dict, description="site cgroup.conf parameters")
    slurmdbd_settings: Settings = Field(default_factory=dict, description="site slurmdbd.conf parameters")
    tenants: list[SlurmTenant] = Field(
        default_factory=empty_list, description="accounts made with sacctmgr at apply (needs accounting)")
    converge: SlurmConverge | None = Field(
        default=None, description="nodes converge themselves at boot from a signed bundle (apply --engine slurm-native)")
    adopted: SlurmAdopted | None = Field(
        default=None, description="an adopted cluster's own values where fleetspec would decide otherwise "
                                  "(written by import; docs/import.md)")

    @field_validator("state_save_location")
    @classmethod
    def _own_directory(cls, value: str) -> str:
        problem = state_path_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class GpuOperator(_Model):
    version: Version
    driver: Literal["operator", "host"] = "operator"


# A container image repository without a tag (the AMD GPU Operator tags the driver images
# it builds itself): the DeviceConfig CRD's spec.driver.image pattern, tag part dropped.
ImageRepository = strict(
    str, pattern=r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(:[0-9]+)?(/[a-zA-Z0-9_]+(?:[._-][a-zA-Z0-9_]+)*)+$", max_length=255)


class AmdGpuOperator(_Model):
    version: Version
    driver: Literal["operator", "host"] = Field(
        default="operator",
        description="operator: the DeviceConfig builds and loads the stack's amdgpu; host: Ansible installs it")
    driver_image: ImageRepository | None = Field(
        default=None, description="registry repository (no tag) where the operator pushes and pulls the driver images it builds")
    registry_secret: Name | None = Field(
        default=None, description="a docker-registry Secret in the operator's namespace for driver_image")


class Component(_Model):
    version: Version


class NetworkOperator(_Model):
    """NVIDIA Network Operator for InfiniBand/RoCE fabrics: RDMA devices in pods."""

    enabled: StrictBool = True
    version: Version | None = None
    rdma: Literal["shared", "sriov"] = Field(
        default="shared", description="shared: RDMA shared device plugin; sriov: RDMA NICs/VFs as host devices")


# Namespaces a tenant may not claim: Kubernetes' own, and the ones fleetspec installs
# its operators into (render/kubernetes/common.py NAMESPACES; tests/spec/test_model_bounds.py
# keeps the two in step). A tenant's LocalQueues and quota there would reach the system.
RESERVED_NAMESPACES = frozenset({
    "default", "kube-system", "kube-public", "kube-node-lease",
    "gpu-operator", "kube-amd-gpu", "kueue-system", "volcano-system", "volcano-monitoring", "slinky", "slurm",
    "cert-manager", "node-feature-discovery", "nvidia-network-operator",
})


class Tenant(_Model):
    name: Name
    namespaces: list[Name] = Field(min_length=1)
    quota: dict[Name, strict(int, ge=0)] = Field(default_factory=dict)
    # Beyond quota: the share of idle GPUs this tenant gets relative to others (KAI's
    # overQuotaWeight), and a hard cap in GPUs per partition (KAI's limit).
    over_quota_weight: strict(int, ge=0) = 1
    limit: dict[Name, strict(int, ge=0)] = Field(default_factory=dict)


class Gang(_Model):
    """Kueue's ``waitForPodsReady``: cluster-wide, for every workload Kueue admits, model
    servers (pod, deployment, statefulset integrations) as well as batch gangs. ``timeout``:
    from admission to all pods ready (default Kueue's own, 30m); ``recovery_timeout``: from
    a running workload losing a pod to its replacement ready (default: ``timeout``, as
    Kueue's; ``0s`` never evicts a workload that was once ready)."""

    timeout: strict(str, pattern=r"^[0-9]+(s|m|h)$") = "30m"
    recovery_timeout: strict(str, pattern=r"^[0-9]+(s|m|h)$") | None = None
    requeue_limit: strict(int, ge=0) | None = None


class Dra(_Model):
    """Dynamic Resource Allocation (Kubernetes 1.34+). ``nvidia``: NVIDIA's DRA driver for
    GPUs (ComputeDomains on NVLink-domain racks). ``gpus: true`` also moves GPU allocation
    from the device plugin to DRA: a DeviceClass per partition, ResourceClaimTemplates in
    the tenants' namespaces."""

    nvidia: Component | None = None
    gpus: StrictBool = False

    @model_validator(mode="after")
    def _gpus_need_a_driver(self) -> "Dra":
        if self.gpus and self.nvidia is None:
            raise ValueError("dra.gpus: true moves GPU allocation to a DRA driver, but none is named: "
                             "add dra.nvidia: {version: ...} (NVIDIA's DRA driver for GPUs)")
        return self


# Workload operators a queueing engine may manage; each is installed and pinned by the
# stack when named here (KubeRay through ``kubernetes.ray``).
Integration = Literal["jobset", "leaderworkerset"]


class Kubernetes(_Model):
    version: Version
    gpu_operator: GpuOperator | None = None
    amd_gpu_operator: AmdGpuOperator | None = None
    queueing: Literal["kueue", "volcano", "kai", "none"] = "kueue"
    # Unset: the queueing engine's own gang (volcano, kai), else Kueue's: one line switches.
    gang: Literal["kueue", "volcano", "kai", "workload-api", "none"] | None = None
    gang_policy: Gang = Field(default_factory=Gang.model_construct)
    quota_owners: list[Literal["kueue", "volcano", "kai"]] | None = Field(
        default=None, description="who holds GPU quota; defaults to the queueing system"
    )
    kueue: Component | None = None
    volcano: Component | None = None
    kai: Component | None = None
    ray: Component | None = None  # the KubeRay operator
    dra: Dra | None = None
    integrations: list[Integration] = Field(default_factory=empty_list)
    network_operator: NetworkOperator = Field(default_factory=NetworkOperator.model_construct)
    tenants: list[Tenant] = Field(default_factory=empty_list)
    values: dict[Name, dict[StrictStr, Any]] = Field(
        default_factory=dict, description="per Helm release: values deep-merged over what fleetspec renders")


class Secrets(_Model):
    """Where each secret lives: references only, resolved at apply time, never rendered.

    ``env:NAME`` (an environment variable), ``file:PATH`` (relative to the spec),
    ``ansible-vault:PATH#KEY`` (a key in an Ansible Vault file; ``vault:`` is its
    deprecated spelling), ``hashicorp-vault:MOUNT/PATH#KEY`` (a key of a HashiCorp Vault
    KV v2 secret, read with $VAULT_ADDR and $VAULT_TOKEN), ``sops:PATH#KEY`` (a key of a
    SOPS-encrypted YAML or JSON file), ``pulumi:KEY`` (a Pulumi config secret of the stack).
    """

    munge_key: SecretRef = "file:.fleetspec/secrets/munge.key"
    slurmdbd_password: SecretRef = "file:.fleetspec/secrets/slurmdbd_password"
    pulumi_passphrase: SecretRef = "env:PULUMI_CONFIG_PASSPHRASE"
    registry_password: SecretRef | None = None


class PackageSource(_Model):
    """One apt repository serving every pinned package (an air-gapped site's mirror)."""

    uri: strict(str, pattern=r"^(https://[^\s'\"]+|file:/[^\s'\"]*)$", max_length=2048)
    suite: strict(str, pattern=r"^[A-Za-z0-9._/~-]+$", max_length=128) = "./"
    components: strict(str, pattern=r"^[A-Za-z0-9._ -]*$", max_length=256) = ""
    key_url: strict(str, pattern=r"^(https://[^\s'\"]+|file:/[^\s'\"]*)$") | None = None
    trusted: StrictBool = False


# An OCI registry as image references name it: host[:port][/path], lower case, no scheme,
# no user:password@ (credentials belong in a pull secret, never in a reference that every
# rendered manifest and plan repeats).
REGISTRY_MIRROR = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)*$"
# A Helm chart repository: https only, no user:password@, no query or fragment.
CHART_REPOSITORY = r"^https://[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?(/[A-Za-z0-9._~-]+)*/?$"


class Packages(_Model):
    mirror: PackageSource | None = None
    registry_mirror: StrictStr | None = Field(
        default=None, max_length=255,
        description="OCI registry (host[:port][/path]) holding every image and OCI chart the Kubernetes side "
                    "uses, each under its upstream registry's name (nvcr.io/nvidia/driver -> MIRROR/nvcr.io/nvidia/driver)")
    chart_repository: StrictStr | None = Field(
        default=None, max_length=2048,
        description="https Helm chart repository serving the charts fleetspec otherwise takes from public "
                    "https repositories (gpu-operator, network-operator, amd-gpu-operator, kuberay-operator, volcano)")

    @field_validator("registry_mirror")
    @classmethod
    def _registry(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if "@" in value or "://" in value:
            raise ValueError("give the registry as host[:port][/path] (registry.example.com/mirror), without a "
                             "scheme or user:password@: pull credentials go in a pull secret, never in a reference")
        if not re.fullmatch(REGISTRY_MIRROR, value):
            raise ValueError(f"{value!r} is not a registry host[:port][/path] (lower case, e.g. "
                             "registry.example.com:5000/mirror)")
        return value

    @field_validator("chart_repository")
    @classmethod
    def _charts(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if "@" in value.split("://", 1)[-1].split("/", 1)[0]:
            raise ValueError("the chart repository URL carries user:password@; give it without credentials "
                             "(helm repo credentials stay in the operator's helm configuration)")
        if not re.fullmatch(CHART_REPOSITORY, value):
            raise ValueError(f"{value!r} is not an https chart repository URL without query or fragment "
                             "(https://charts.example.com/stable)")
        return value


Disruption = Literal["none", "reconfigure", "restart-daemon", "drain", "drain-reboot"]


class Hook(_Model):
    """A site playbook run inside each apply wave (after drain, before verify)."""

    playbook: strict(str, pattern=r"^[A-Za-z0-9._/-]+\.ya?ml$", max_length=1024)
    disruption: Disruption = Field(description="what running it does to a node; the plan drains accordingly")
    partitions: list[Name] = Field(default_factory=empty_list, description="only nodes of these partitions (default: all)")


class Hooks(_Model):
    before: list[Hook] = Field(default_factory=empty_list, description="before fleetspec's site.yml in the wave")
    after: list[Hook] = Field(default_factory=empty_list, description="after site.yml, before verify")


class AnsibleSite(_Model):
    hooks: Hooks = Field(default_factory=Hooks.model_construct)
    vars: dict[strict(str, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128), Any] = Field(
        default_factory=dict, description="site variables for the site's hook playbooks and roles")


HealthAction = Literal["none", "reset-when-idle", "quarantine-device", "drain", "drain-reboot", "replace"]
HealthCheck = Literal["kernel-log", "gpu-memory", "gpu-count", "fabric", "pcie", "infiniband", "nvlink", "dcgm"]
SlurmHealthState = Literal["ANY", "IDLE", "ALLOC", "MIXED", "CYCLE"]


class Health(_Model):
    """The fault policy: which checks run, how often, and the action per fault class
    (docs/health.md lists the classes, their default actions and the vendor guidance
    each default follows)."""

    interval: strict(int, ge=5, le=86400) = Field(
        default=300, description="seconds between node checks (Slurm HealthCheckInterval)"
    )
    checks: list[HealthCheck] = Field(
        default_factory=lambda: ["kernel-log", "gpu-memory", "gpu-count", "fabric", "pcie", "infiniband", "nvlink"]
    )
    dcgm_level: strict(int, ge=1, le=4) = Field(
        default=1, description="with 'dcgm' in checks: dcgmi diag -r LEVEL on nodes where DCGM is installed "
                               "(2 and up load the GPUs for minutes to hours)"
    )
    actions: dict[strict(str, pattern=r"^[a-z0-9-]+$"), HealthAction] = Field(
        default_factory=dict, description="fault class -> action; the catalog's defaults for the rest"
    )
    slurm_node_state: list[SlurmHealthState] = Field(
        default_factory=lambda: ["ANY"], description="Slurm HealthCheckNodeState: ANY also rechecks drained nodes"
    )
    min_healthy: strict(int, ge=0) | strict(str, pattern=r"^(100|[1-9]?[0-9])%$|^[0-9]+$") = Field(
        default="51%", description="Kubernetes remediation acts only while at least this many of the GPU nodes are "
                                   "healthy: a count or a percentage, rounded up (medik8s NHC minHealthy; 0: no limit)"
    )

    @field_validator("min_healthy", mode="before")
    @classmethod
    def _count_or_percentage(cls, value: Any) -> str:
        text = str(value) if type(value) is int else value if type(value) is str else ""
        number = text[:-1] if text.endswith("%") else text
        if number.isascii() and number.isdigit() and str(int(number)) == number and (number == text or int(number) <= 100):
            return text
        raise ValueError(f"give a count of nodes (3) or a percentage from 0% to 100% (51%), not {value!r}")

    @field_validator("actions")
    @classmethod
    def _known_classes(cls, actions: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(actions) - set(FAULTS))
        if unknown:
            raise ValueError(f"unknown fault class {', '.join(unknown)}; known: {', '.join(sorted(FAULTS))}")
        return actions


class TicketWebhook(_Model):
    """Where break-fix tickets go: an https URL (http only to loopback), no credentials in it."""

    url: strict(str, pattern=r"^https?://[^\s@]+$", max_length=2048)
    token: SecretRef | None = Field(default=None, description="sent as 'Authorization: Bearer ...': a reference")
    timeout: strict(int, ge=1, le=120) = 10


IPv4 = strict(str, pattern=r"^((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])$")


class Pxe(_Model):
    """The boot chain: dnsmasq answering DHCP on the provisioning network and serving iPXE
    over TFTP; an iPXE script per node group boots its stack's golden image."""

    server: IPv4 = Field(description="this boot server's address on the provisioning network")
    interface: strict(str, pattern=r"^[A-Za-z0-9._-]+$", max_length=15) = Field(
        description="the interface dnsmasq serves on")
    dhcp_range: strict(str, pattern=r"^[0-9.]+,[0-9.]+(,[0-9]+[smhd])?$", max_length=64) = Field(
        description="start,end[,lease] of the addresses dnsmasq hands out")
    image_url: strict(str, pattern=r"^https?://[^\s@'\"]+$", max_length=1024) = Field(
        description="where the golden images are served: <image_url>/<stack>/{vmlinuz,initrd.img,rootfs.squashfs}")
    dns: list[IPv4] = Field(
        default_factory=empty_list, max_length=3,
        description="the site's DNS servers, handed out with each lease (DHCP option 6): a golden image's slurmd "
                    "finds slurm.controllers by name (configless)")


ImageUri = strict(str, pattern=r"^https?://[^\s'\"]+$", max_length=2048)


class FirmwareImage(_Model):
    """A firmware image: its URI alone (the BMC fetches it: Redfish SimpleUpdate), or
    ``{url, sha256}``: fleetspec fetches it and checks the SHA-256 before pushing it to a BMC
    that takes pushed images (Redfish MultipartHttpPushUri)."""

    url: ImageUri = Field(description="where the image is served (the site's image store)")
    sha256: strict(str, pattern=r"^[0-9a-f]{64}$") | None = Field(
        default=None, description="the image's SHA-256, 64 lower-case hex digits")

    @model_validator(mode="before")
    @classmethod
    def _uri_alone(cls, data: Any) -> Any:
        return {"url": data} if isinstance(data, str) else data


class BareMetal(_Model):
    """Hot spares, break-fix and the boot chain (docs/bare-metal.md)."""

    spares: dict[Name, Hostlist] = Field(
        default_factory=dict, description="partition -> spare nodes (defined in racks) that join it on 'replace'")
    tickets: TicketWebhook | None = None
    pxe: Pxe | None = None
    firmware_images: dict[Literal["vbios", "nvswitch", "connectx", "bmc", "bios"],
                          dict[FirmwareVersion, FirmwareImage]] = Field(
        default_factory=dict,
        description="component -> firmware version -> the image: its URI (the BMC fetches it: Redfish SimpleUpdate), "
                    "or {url, sha256} (a BMC that takes pushed images gets it from fleetspec, checked first)")


class SiteGpuModel(_Model):
    """A GPU model the catalog does not know (an older or workstation board of a running
    cluster), declared by the site. No sourced facts stand behind it: the tuple checks
    skip its nodes and rule site-gpu-model says so."""

    vendor: Literal["nvidia", "amd"]
    name: strict(str, pattern=r"^[A-Za-z0-9][A-Za-z0-9 ._()/-]*$", max_length=128) = Field(
        description="the name nvidia-smi / amd-smi prints for it")
    generation: Name = Field(description="the architecture family that names its generated partition")
    architecture: strict(str, pattern=r"^[A-Za-z0-9._-]+( [A-Za-z0-9._-]+)*$", max_length=64) | None = Field(
        default=None, description="as nvidia-smi prints it (Ada Lovelace)")
    memory_gb: PositiveInt
    form_factor: Literal["pcie", "sxm", "oam", "mxm", "other"] = "pcie"
    gres: strict(str, pattern=GRES_TYPE) = Field(description="the GRES type name Slurm uses")


# Node operating systems. EL8 (rocky-8, rhel-8, almalinux-8) is refused with its reason:
# ansible-core 2.17+ runs modules on Python 3.7+ only, and EL8's dnf bindings exist only for
# its Python 3.6 (ansible/ansible#82068; #83357: "Ansible support for RHEL-8 hosts ends at 2.16").
NodeOs = Literal["ubuntu-22.04", "ubuntu-24.04", "debian-12",
                 "rocky-9", "rhel-9", "almalinux-9", "rocky-10", "rhel-10", "almalinux-10"]
_REFUSED_OS = {f"{d}-8": ("EL8 cannot be managed by the ansible-core fleetspec runs (2.17+): its modules need "
                          "Python 3.7+, and EL8's dnf Python bindings exist only for its Python 3.6 "
                          "(ansible/ansible#82068). Move the nodes to EL9 (rocky-9, rhel-9, almalinux-9) or EL10")
               for d in ("rocky", "rhel", "almalinux")}


class FleetBody(_Model):
    os: NodeOs

    @field_validator("os", mode="before")
    @classmethod
    def _refused_os(cls, value: Any) -> Any:
        if isinstance(value, str) and value in _REFUSED_OS:
            raise ValueError(f"os {value!r} is not supported: {_REFUSED_OS[value]}")
        return value

    @field_validator("baremetal")
    @classmethod
    def _no_pxe_on_el(cls, baremetal: BareMetal | None, info: ValidationInfo) -> BareMetal | None:
        os_ = info.data.get("os")  # validated first (declared first); absent when it was refused
        if baremetal is not None and baremetal.pxe is not None and isinstance(os_, str) and not os_.startswith(
                ("ubuntu-", "debian-")):
            raise ValueError(f"baremetal.pxe is not supported on {os_} yet: the golden image is built with "
                             "debootstrap and boots a Debian/Ubuntu root (render/baremetal.py); an EL image needs "
                             "its own recipe (dnf --installroot, dracut). Provision EL nodes with the site's "
                             "installer (kickstart) and remove pxe")
        return baremetal

    stacks: dict[Name, Stack] = Field(
        default_factory=dict, description="pinned tuples by name; a fleet of CPU-only nodes has none")
    gpu_models: dict[Name, Annotated[SiteGpuModel, WHEN_GIVEN]] = Field(
        default_factory=dict, description="GPU models the catalog does not know, declared by the site")
    fabric: Fabric | None = None
    racks: list[Rack] = Field(min_length=1)
    slurm: Slurm | None = None
    kubernetes: Annotated[Kubernetes, WHEN_GIVEN] | None = None
    secrets: Annotated[Secrets, WHEN_GIVEN] = Field(default_factory=Secrets.model_construct)
    packages: Annotated[Packages, WHEN_GIVEN] = Field(default_factory=Packages.model_construct)
    ansible: Annotated[AnsibleSite, WHEN_GIVEN] | None = None
    health: Annotated[Health, WHEN_GIVEN] | None = None
    baremetal: Annotated[BareMetal, WHEN_GIVEN] | None = None
    suppress: list[strict(str, pattern=r"^[a-z0-9.-]+$")] = Field(default_factory=empty_list)

    @field_validator("racks")
    @classmethod
    def _unique_rack_names(cls, racks: list[Rack]) -> list[Rack]:
        seen: set[str] = set()
        for rack in racks:
            if rack.name in seen:
                raise ValueError(f"rack name '{rack.name}' is used twice; give each rack its own name")
            seen.add(rack.name)
        return racks


class FleetSpec(_Model):
    apiVersion: Literal["fleetspec.io/v1alpha1"]
    kind: Literal["Fleet"]
    metadata: Metadata
    spec: FleetBody
