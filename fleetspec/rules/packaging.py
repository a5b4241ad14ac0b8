"""Rules over what the node layer must install: every pinned version must name a package."""

from __future__ import annotations

from collections.abc import Iterator

from fleetspec.catalog import Catalog
from fleetspec.compile.ir import Fleet
from fleetspec.findings import Finding
from fleetspec.packages import EL_OS, PackageError, packages_for, unconfirmed_pins
from fleetspec.rules.base import error, warning


def check_package_pins(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    """The renderer turns each tuple into exact apt pins; a tuple it cannot pin is an error
    here, with its location, rather than a failure halfway through ``render``."""
    for stack in fleet.stacks:
        gpus = {(n.gpu.model, n.gpu.count): n.gpu for n in fleet.nodes if n.stack == stack.name}
        if not gpus:
            continue
        try:
            pins = packages_for(stack, fleet.os, [gpus[k] for k in sorted(gpus)])
        except PackageError as exc:
            how = ("" if fleet.os in EL_OS else
                   ". Pin a version fleetspec can name as a package, or give the full package version")
            yield error("package-pin", f"{exc}{how}", stack.path + ((exc.component,) if exc.component else ()))
            continue
        for pin in pins:
            if not pin.exact:
                key = {"cudnn": "cudnn", "rocm": "rocm", "rccl": "rocm", "amdgpu": "amdgpu"}.get(pin.role)
                # Only cuDNN takes its full build in the spec; another component's advice must
                # not name cuDNN (#28 item 7).
                how = ("Give the full version (e.g. cudnn: \"9.17.0.29\") for an exact pin" if key == "cudnn" else
                       f"Check which build that is with 'apt-cache policy {pin.name}' against the repository "
                       "before a canary wave")
                yield warning(
                    "package-pin",
                    f"fleetspec does not know the repository build of {pin.name} for this release and pins the "
                    f"pattern {pin.name}={pin.version}: apt picks the matching build. {how}",
                    stack.path + ((key,) if key else ()),
                )
        k8s = fleet.kubernetes
        operator_driver = (k8s is not None and k8s.gpu_operator is not None and k8s.gpu_operator.driver == "operator"
                           and all(n.scheduler == "kubernetes" for n in fleet.nodes if n.stack == stack.name))
        check = ("dnf list --showduplicates against the repository, and fix the row" if fleet.os in EL_OS else
                 "apt-cache policy against the repository")
        for key, why in unconfirmed_pins(stack, fleet.os):
            if key == "driver" and operator_driver:
                continue  # the GPU Operator installs the driver: no host package is pinned
            yield warning("package-pin", f"{why}. Check it with {check} before a canary wave (the pre-check stops a "
                          "host whose pins do not resolve)", stack.path + (key,))
