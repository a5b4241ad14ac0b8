"""Parsers from GPU-stack tool output to plain data.

The code lives in collector.py, because that file is copied to nodes alone
and must carry its parsers; this module is the package's import path for
them, so the comparison code and the tests never load the collector by path.
"""

from fleetspec.verify.collector import (
    decode_cudart_version,
    decode_cudnn_version,
    decode_nccl_version,
    library_file_version,
    parse_amd_smi_json,
    parse_apt_mark_showhold,
    parse_cuda_version_json,
    parse_cuda_version_txt,
    parse_cudnn_version_header,
    parse_dpkg_query,
    parse_dpkg_search,
    parse_fabricmanager_version,
    parse_infiniband_sysfs,
    parse_ldconfig,
    parse_nvcc_version,
    parse_nvidia_smi_xml,
    parse_os_release,
    parse_proc_driver_version,
    parse_query_gpu_csv,
    parse_rocm_smi_json,
    parse_rocm_version_file,
    parse_rpm_query,
    parse_slurmd_version,
)

__all__ = [
    "decode_cudart_version",
    "decode_cudnn_version",
    "decode_nccl_version",
    "library_file_version",
    "parse_amd_smi_json",
    "parse_apt_mark_showhold",
    "parse_cuda_version_json",
    "parse_cuda_version_txt",
    "parse_cudnn_version_header",
    "parse_dpkg_query",
    "parse_dpkg_search",
    "parse_fabricmanager_version",
    "parse_infiniband_sysfs",
    "parse_ldconfig",
    "parse_nvcc_version",
    "parse_nvidia_smi_xml",
    "parse_os_release",
    "parse_proc_driver_version",
    "parse_query_gpu_csv",
    "parse_rocm_smi_json",
    "parse_rocm_version_file",
    "parse_rpm_query",
    "parse_slurmd_version",
]
