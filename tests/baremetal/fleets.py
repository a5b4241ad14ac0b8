"""Specs for the bare-metal tests: a rack of two H100 nodes and a spare, behind one BMC
service (the emulator's) named per node by ``system: "{host}"``."""

from __future__ import annotations

from fleetspec.pipeline import CompileResult, compile_text


def spec(endpoint: str, bios: str = "{ProcTurboMode: Enabled}", extra: str = "", rack_bmc: str = "",
         stack_extra: str = "", gpus: int = 8) -> str:
    return f"""\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: metal}}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"{stack_extra}}}
  racks:
    - name: r01
      bmc:
        endpoint: "{endpoint}"
        system: "{{host}}"
        username: admin
        password: env:FLEETSPEC_TEST_BMC_PASSWORD{rack_bmc}
      nodes:
        - hosts: "gpu-[01-02]"
          gpu: {{model: h100-sxm, count: {gpus}}}
          stack: hopper
          scheduler: slurm
          memory_gb: 1024
          sockets: 2
          bmc:
            bios: {bios}
        - hosts: spare-01
          gpu: {{model: h100-sxm, count: {gpus}}}
          stack: hopper
          scheduler: slurm
          partition: spares
  slurm: {{version: "24.11.1", controllers: ctl-01}}
{extra}"""


def compiled(text: str) -> CompileResult:
    return compile_text(text, "fleet.yaml")
