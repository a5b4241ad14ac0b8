"""Rules over stack tuples: do these versions work together, and on these GPUs?

Severity follows certainty. A combination that cannot work is an error; one that works
with limits (CUDA minor-version compatibility below a release's GA driver) or rests on
an unconfirmed catalog fact is a warning that says so; a version the catalog does not
know is an `unknown-version` warning, never a silent pass. Each tuple is checked once
(at its definition); each (tuple, GPU model) pair once (at the first node group that
uses it).
"""

from __future__ import annotations

from collections.abc import Iterator

from fleetspec.catalog import Catalog
from fleetspec.compile.ir import Fleet, Node, StackTuple
from fleetspec.findings import Finding, dotted
from fleetspec.rules.base import error, warning
from fleetspec.versions import at_least, major_minor, parse_version, version_key


def _cite(catalog: Catalog, keys: tuple[str, ...]) -> str:
    return f" (source: {catalog.source_urls(keys[:1])[0]})" if keys else ""


def _users(fleet: Fleet) -> dict[tuple[str, str], Node]:
    """First node group using each (stack, GPU model) pair."""
    first: dict[tuple[str, str], Node] = {}
    for node in fleet.nodes:
        first.setdefault((node.stack, node.gpu.model), node)
    return first


def _nvidia(fleet: Fleet) -> Iterator[StackTuple]:
    return (s for s in fleet.stacks if s.vendor == "nvidia")


def _amd(fleet: Fleet) -> Iterator[StackTuple]:
    return (s for s in fleet.stacks if s.vendor == "amd")


def check_stack_vendor(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for (stack_name, _), node in _users(fleet).items():
        stack = fleet.stack(stack_name)
        if stack is not None and stack.vendor != node.gpu.vendor:
            yield error(
                "stack-vendor-mismatch",
                f"node group on {node.gpu.model} ({node.gpu.vendor.upper()}) uses stack '{stack.name}', an "
                f"{stack.vendor.upper()} tuple. Point it at a stack with "
                f"{'driver, cuda and nccl' if node.gpu.vendor == 'nvidia' else 'rocm and rccl'}",
                node.path + ("stack",),
            )


def check_driver_for_cuda(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for s in _nvidia(fleet):
        if not (s.driver and s.cuda and parse_version(s.driver) and parse_version(s.cuda)):
            continue
        cuda_major = version_key(s.cuda)[0]
        floor = catalog.cuda_compat_floor(cuda_major)
        path = s.path + ("driver",)
        if floor and not at_least(s.driver, floor[0]):
            yield error(
                "driver-too-old-for-cuda",
                f"driver {s.driver} cannot run CUDA {s.cuda}: every CUDA {cuda_major}.x toolkit needs a driver "
                f">= {floor[0]} even under minor-version compatibility{_cite(catalog, floor[1])}. "
                f"Raise the driver to a {floor[0]}+ release or use CUDA {cuda_major - 1}.x",
                path,
            )
            continue
        release = catalog.cuda_release(s.cuda)
        if release is None:
            continue  # unknown-version reports it
        update = version_key(s.cuda)[2] if len(version_key(s.cuda)) > 2 else 0
        needed = release.min_driver(update)
        if not at_least(s.driver, needed):
            yield warning(
                "driver-too-old-for-cuda",
                f"driver {s.driver} is below CUDA {s.cuda}'s minimum driver {needed}: it runs under CUDA "
                f"minor-version compatibility, without PTX JIT of newer code and without features that need "
                f"the newer driver{_cite(catalog, release.sources)}. Use driver >= {needed} for full support",
                path,
            )


def check_driver_for_gpu(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for (stack_name, model_id), node in _users(fleet).items():
        stack, gpu = fleet.stack(stack_name), catalog.gpus.get(model_id)
        if not (stack and gpu and stack.vendor == "nvidia" and stack.driver and parse_version(stack.driver)):
            continue
        path = stack.path + ("driver",)
        branch = version_key(stack.driver)[0]
        if gpu.max_driver_branch is not None and branch > gpu.max_driver_branch:
            yield error(
                "driver-unsupported-gpu",
                f"driver {stack.driver} (R{branch}) does not support {gpu.name}: R{gpu.max_driver_branch} is the "
                f"last branch for {gpu.generation.title()}{_cite(catalog, gpu.sources)}. "
                f"Pin an R{gpu.max_driver_branch} driver for the {gpu.id} nodes (node group at {_where(node)})",
                path,
            )
        if gpu.min_driver and not at_least(stack.driver, gpu.min_driver):
            make = error if gpu.confirmed("min_driver") else warning
            note = "" if gpu.confirmed("min_driver") else " (an unconfirmed catalog fact)"
            yield make(
                "driver-unsupported-gpu",
                f"driver {stack.driver} is older than the first driver that supports {gpu.name}, "
                f"{gpu.min_driver}{note}{_cite(catalog, gpu.sources)}. Raise the driver",
                path,
            )
    kube = fleet.kubernetes
    if not (kube and kube.gpu_operator and kube.gpu_operator.driver == "operator"):
        return
    operated = {(n.stack, n.gpu.model) for n in fleet.nodes if n.scheduler == "kubernetes"}
    for stack_name, model_id in sorted(operated):
        stack, gpu = fleet.stack(stack_name), catalog.gpus.get(model_id)
        if not (stack and gpu and gpu.gpu_operator_min_driver and stack.driver and parse_version(stack.driver)):
            continue
        if not at_least(stack.driver, gpu.gpu_operator_min_driver):
            yield error(
                "driver-unsupported-gpu",
                f"under the GPU Operator, {gpu.name} needs driver container >= {gpu.gpu_operator_min_driver}; "
                f"stack '{stack.name}' pins {stack.driver}{_cite(catalog, ('GPUOP_DOC',))}. Raise the driver",
                stack.path + ("driver",),
            )


def check_cuda_for_gpu(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for (stack_name, model_id), node in _users(fleet).items():
        stack, gpu = fleet.stack(stack_name), catalog.gpus.get(model_id)
        if not (stack and gpu and stack.vendor == "nvidia" and stack.cuda and parse_version(stack.cuda)):
            continue
        path = stack.path + ("cuda",)
        if gpu.max_cuda_major is not None and version_key(stack.cuda)[0] > gpu.max_cuda_major:
            yield error(
                "cuda-unsupported-gpu",
                f"CUDA {stack.cuda} cannot build for {gpu.name} (compute capability {gpu.compute_capability}): "
                f"CUDA {gpu.max_cuda_major}.x is its last toolkit{_cite(catalog, gpu.sources)}. "
                f"Use CUDA {gpu.max_cuda_major}.x for the {gpu.id} nodes (node group at {_where(node)})",
                path,
            )
        if gpu.min_cuda and not at_least(stack.cuda, gpu.min_cuda):
            make = error if gpu.confirmed("min_cuda") else warning
            note = "" if gpu.confirmed("min_cuda") else " (an unconfirmed catalog fact)"
            yield make(
                "cuda-unsupported-gpu",
                f"CUDA {stack.cuda} predates {gpu.name}: it needs CUDA >= {gpu.min_cuda}{note} "
                f"(compute capability {gpu.compute_capability}){_cite(catalog, gpu.sources)}. Raise cuda",
                path,
            )


def check_nccl_for_cuda(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    first13 = catalog.nccl_first_cuda13()
    for s in _nvidia(fleet):
        if not (s.nccl and s.cuda and parse_version(s.nccl) and parse_version(s.cuda)):
            continue
        if version_key(s.cuda)[0] >= 13 and not at_least(s.nccl, first13.version):
            yield error(
                "nccl-cuda-mismatch",
                f"NCCL {s.nccl} has no CUDA 13 build: NCCL ships CUDA 13 builds from {first13.version}"
                f"{_cite(catalog, first13.sources)}. Use NCCL >= {first13.version} with CUDA {s.cuda}, "
                "or a CUDA 12.x toolkit",
                s.path + ("nccl",),
            )


def check_nccl_for_gpu(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for (stack_name, model_id), _node in _users(fleet).items():
        stack, gpu = fleet.stack(stack_name), catalog.gpus.get(model_id)
        if not (stack and gpu and gpu.min_nccl and stack.nccl and parse_version(stack.nccl)):
            continue
        if not at_least(stack.nccl, gpu.min_nccl):
            yield error(
                "nccl-unsupported-gpu",
                f"NCCL {stack.nccl} predates {gpu.name}: support arrived in NCCL {gpu.min_nccl}"
                f"{_cite(catalog, (gpu.sources[-1],))}. Raise nccl",
                stack.path + ("nccl",),
            )


def check_cudnn_for_cuda(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for s in _nvidia(fleet):
        if not (s.cudnn and s.cuda and parse_version(s.cudnn) and parse_version(s.cuda)):
            continue
        path = s.path + ("cudnn",)
        cuda_mm = version_key(major_minor(s.cuda))
        release = catalog.cudnn_release(s.cudnn)
        if release is None:
            last = catalog.cudnn_last_without_cuda13()
            if cuda_mm[0] >= 13 and not at_least(s.cudnn, _next_patch(last.version)):
                yield error(
                    "cudnn-cuda-mismatch",
                    f"cuDNN {s.cudnn} has no CUDA 13 build: {last.version} and older list only CUDA 12.x/11.x"
                    f"{_cite(catalog, last.sources)}. Use a newer cuDNN (9.17.0 supports CUDA 13.0-13.1)",
                    path,
                )
            continue
        ranges = [(version_key(lo), version_key(hi)) for lo, hi in release.facts.get("cuda", [])]
        if any(lo <= cuda_mm <= hi for lo, hi in ranges):
            continue
        listed = ", ".join(f"{'.'.join(map(str, lo))}-{'.'.join(map(str, hi))}" for lo, hi in ranges)
        same_major = any(lo[0] == cuda_mm[0] for lo, _ in ranges)
        if same_major:
            yield warning(
                "cudnn-cuda-mismatch",
                f"cuDNN {s.cudnn}'s support matrix lists CUDA {listed}, not {major_minor(s.cuda)}; its CUDA "
                f"{cuda_mm[0]}.x build should run under minor-version compatibility{_cite(catalog, release.sources)}. "
                "Prefer a cuDNN that lists this CUDA",
                path,
            )
        else:
            yield error(
                "cudnn-cuda-mismatch",
                f"cuDNN {s.cudnn} has no build for CUDA {cuda_mm[0]}.x (its support matrix lists CUDA {listed})"
                f"{_cite(catalog, release.sources)}. Pick a cuDNN built for CUDA {major_minor(s.cuda)}",
                path,
            )


def check_rocm_for_gpu(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for (stack_name, model_id), _node in _users(fleet).items():
        stack, gpu = fleet.stack(stack_name), catalog.gpus.get(model_id)
        if not (stack and gpu and stack.vendor == "amd" and stack.rocm and gpu.min_rocm):
            continue
        if parse_version(stack.rocm) and not at_least(stack.rocm, gpu.min_rocm):
            yield error(
                "rocm-unsupported-gpu",
                f"ROCm {stack.rocm} does not support {gpu.name} ({gpu.gfx_target}): it needs ROCm >= "
                f"{gpu.min_rocm}{_cite(catalog, gpu.sources)}. Raise rocm",
                stack.path + ("rocm",),
            )


def check_rccl_for_rocm(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for s in _amd(fleet):
        if not (s.rocm and parse_version(s.rocm)):
            continue
        release = catalog.rocm_release(s.rocm)
        bundled = release.facts.get("rccl") if release else None
        if (s.rccl and "rccl" not in s.resolved and bundled
                and parse_version(s.rccl) != parse_version(str(bundled))):
            yield error(
                "rccl-rocm-mismatch",
                f"ROCm {s.rocm} ships RCCL {bundled}, not {s.rccl}; RCCL is built against its ROCm release's HIP "
                f"runtime{_cite(catalog, release.sources)}. Set rccl: \"{bundled}\" or drop rccl to use the bundled one",
                s.path + ("rccl",),
            )
        if s.amdgpu and parse_version(s.amdgpu):
            driver = catalog.amdgpu_release(s.amdgpu)
            series = major_minor(s.rocm)
            if driver and series not in driver.facts.get("rocm", []):
                make = warning if driver.unconfirmed else error
                yield make(
                    "rccl-rocm-mismatch",
                    f"amdgpu {s.amdgpu} is documented for ROCm {', '.join(driver.facts['rocm'])}, not {series}"
                    f"{_cite(catalog, driver.sources)}. Pick an amdgpu release that lists ROCm {series}",
                    s.path + ("amdgpu",),
                )


def check_unknown_versions(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    def unknown(s: StackTuple, key: str, what: str) -> Finding:
        return warning(
            "unknown-version",
            f"{what} {getattr(s, key)} is not in the catalog, so its compatibility is not checked. Check it "
            "against the vendor's release notes, or pick a version 'fleetspec catalog' lists",
            s.path + (key,),
        )

    for s in fleet.stacks:
        if s.vendor == "nvidia":
            if s.driver and parse_version(s.driver) and catalog.driver_branch(s.driver) is None:
                yield unknown(s, "driver", "driver branch of")
            elif s.driver and parse_version(s.driver):
                branch = version_key(s.driver)[0]
                known = catalog.driver_releases(branch)
                if s.driver not in known:
                    # The catalog names some releases of the branch, never all of them: a point
                    # release it has not seen may be real, or a typo (580.95.99). A warning that
                    # says which it knows, never an error (#28 item 7).
                    cited = sorted({src for srcs in known.values() for src in srcs})
                    yield warning(
                        "unknown-version",
                        f"driver {s.driver} is not a release of the R{branch} branch that the catalog knows "
                        f"({', '.join(sorted(known, key=version_key)) or 'none'}{_cite(catalog, tuple(cited))}); "
                        "the catalog does not list every point release, so it cannot tell a release it has not "
                        "seen from a typo. Check that NVIDIA published it (each data center driver release has "
                        f"its redistrib_{s.driver}.json at {catalog.sources.get('DRV_REDIST', '')}), or pick a "
                        "release listed here",
                        s.path + ("driver",),
                    )
            if s.cuda and parse_version(s.cuda):
                if catalog.cuda_never_released(s.cuda):
                    yield error("unknown-version", f"CUDA {major_minor(s.cuda)} was never released. "
                                "Pick a released toolkit (12.6, 12.8, 12.9, 13.x)", s.path + ("cuda",))
                elif catalog.cuda_release(s.cuda) is None:
                    yield unknown(s, "cuda", "CUDA")
            if s.nccl and parse_version(s.nccl) and catalog.nccl_release(s.nccl) is None:
                yield unknown(s, "nccl", "NCCL")
            if s.cudnn and parse_version(s.cudnn) and catalog.cudnn_release(s.cudnn) is None:
                no_cuda13 = s.cuda and parse_version(s.cuda) and version_key(s.cuda)[0] >= 13 and not at_least(
                    s.cudnn, _next_patch(catalog.cudnn_last_without_cuda13().version))
                if not no_cuda13:  # cudnn-cuda-mismatch already reports it as an error
                    yield unknown(s, "cudnn", "cuDNN")
        else:
            if s.rocm and parse_version(s.rocm) and catalog.rocm_release(s.rocm) is None:
                yield unknown(s, "rocm", "ROCm")
            if s.amdgpu and parse_version(s.amdgpu) and catalog.amdgpu_release(s.amdgpu) is None:
                yield unknown(s, "amdgpu", "amdgpu")


def _where(node: Node) -> str:
    return dotted(node.path)


def _next_patch(version: str) -> str:
    parts = list(version_key(version))
    parts[-1] += 1
    return ".".join(map(str, parts))



def check_amdgpu_pinned(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    """An AMD tuple should pin the kernel driver too: ROCm's user space is only supported
    with a window of amdgpu releases. That holds wherever the nodes run: on Slurm hosts
    Ansible installs nothing without a pin, and on Kubernetes nodes the DeviceConfig then
    leaves the kernel's inbox amdgpu in place (driver.enable false)."""
    used = {n.stack for n in fleet.nodes if n.gpu.vendor == "amd"}
    for s in _amd(fleet):
        if s.name not in used or s.amdgpu or not (s.rocm and parse_version(s.rocm)):
            continue
        release = catalog.rocm_release(s.rocm)
        hint = f" (ROCm {release.version} ships with amdgpu {release.facts['amdgpu']})" if release and \
            release.facts.get("amdgpu") else ""
        yield warning(
            "amdgpu-unpinned",
            f"stack '{s.name}' pins ROCm {s.rocm} but not the amdgpu kernel driver{hint}: nodes keep whatever "
            "driver they boot with (on Kubernetes the kernel's inbox module), outside the window ROCm "
            "supports. Pin amdgpu in the stack",
            s.path + ("rocm",),
        )
