"""Rebuild service/data/devices.json (the nominal catalog) from the team's datasheet collection.

Usage: python scripts/import_devices.py tests/data/team_datasheets.json > service/data/devices.json
(the team collection, shared/data/devices.json, as copied into the repository)

Every number keeps the citation the collection gives for it (the most specific source key that
covers the field). Only dense datasheet peaks are taken; measured figures are left out on purpose:
they belong in benchmark submissions, not in the nominal catalog.
"""

from __future__ import annotations

import json
import re
import sys

GIB = 2**30
MIB = 2**20

# peak_dense key -> (dtype, unit)
PEAK_KEYS = {
    "fp64_tflops": ("fp64", "vector"),
    "fp64_tensor_tflops": ("fp64", "tensor"),
    "fp32_tflops": ("fp32", "vector"),
    "fp32_matrix_tflops": ("fp32", "tensor"),
    "tf32_tensor_tflops": ("tf32", "tensor"),
    "fp16_tensor_tflops": ("fp16", "tensor"),
    "bf16_tensor_tflops": ("bf16", "tensor"),
    "fp8_tensor_tflops": ("fp8", "tensor"),
    "int8_tensor_tops": ("int8", "tensor"),
    "int4_tensor_tops": ("int4", "tensor"),
    "fp4_tensor_tflops": ("fp4", "tensor"),
}


def citation(device: dict, path: str) -> str:
    """The number's source as "Title (URL)": the collection's first source with an address for the most specific
    key that covers the field (its research notes, "seen; ...", are left in the collection)."""
    sources = device.get("sources", {})
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        key = ".".join(parts[:cut])
        if key in sources:
            found = sources[key]
            return first_source(found if isinstance(found, list) else [str(found)])
    return f"team datasheet collection, entry {device['id']} (no per-field source listed)"


NOTES = ("seen", "mirror", "third-party", "canonical", "not retrieved")


def first_source(entries: list[str]) -> str:
    for entry in entries:
        web = re.match(r"(https?://\S+?)[.,;]?(?:\s+\((.*)\))?$", entry.strip())
        if web:
            url, note = web.groups()
            return f"{_title(note, url)} ({url})"
        code = re.match(r"github:([\w.-]+)/([\w.-]+)\s+(\S+)(?:\s+@(\w+))?", entry.strip())
        if code:
            owner, repo, file, ref = code.groups()
            return f"{owner}/{repo}, {file} (https://github.com/{owner}/{repo}/blob/{ref or 'HEAD'}/{file})"
    return "team datasheet collection: " + entries[0].split(";")[0].strip()


def _title(note: str | None, url: str) -> str:
    """The note's first phrase when it names the document (e.g. "H100 datasheet"), else the page's address."""
    first = (note or "").split(";")[0].strip()
    if first and not first.lower().startswith(NOTES + ("and ", "or ")) and len(first) <= 80:
        return first
    host_and_path = re.sub(r"^https?://(www\.)?", "", url).rstrip("/")
    return host_and_path if len(host_and_path) <= 80 else host_and_path[:77] + "..."


MODAL = ("Modal, 'Why does an NVIDIA H100 80GB card offer 85.52 GB?' "
         "(https://thundergolfer.com/blog/nvidia-gpu-memory-capacity): memory.total reported by NVML via nvidia-smi")
# The memory the runtime exposes (what vLLM's gpu_memory_utilization multiplies), where a figure is
# published: CUDA's total where one was measured, else NVML's memory.total, which can exceed CUDA's by a
# fraction of a GiB. Devices without a cited figure carry none, and analyses then say they used the as-built size.
USABLE_MEMORY = {
    "nvidia-a100-80gb-sxm": (85_198_045_184, "team datasheet collection, memory.capacity_usable_reported: deviceQuery "
                                             "85,198,045,184 bytes (79.35 GiB) total global memory"),
    "nvidia-a100-40gb-sxm": (40_960 * MIB, f"{MODAL}: A100 40GB, 40,960 MiB"),
    "nvidia-h100-sxm": (81_559 * MIB, f"{MODAL}: H100 80GB, 81,559 MiB"),
    "nvidia-h200-sxm": (143_771 * MIB, f"{MODAL}: H200, 143,771 MiB (also nvidia-smi on this project's H200 machine)"),
    "nvidia-a10": (23_028 * MIB, f"{MODAL}: A10, 23,028 MiB"),
    "nvidia-l40s": (46_068 * MIB, f"{MODAL}: L40S, 46,068 MiB"),
    "nvidia-l4": (23_034 * MIB, f"{MODAL}: L4, 23,034 MiB"),
    "nvidia-t4": (15_360 * MIB, f"{MODAL}: T4, 15,360 MiB"),
}

DGX_BASEPOD = ("NVIDIA DGX BasePOD reference architecture, Core Components "
               "(https://docs.nvidia.com/dgx-basepod/reference-architecture-infrastructure-foundation-enterprise-ai/"
               "latest/core-components.html)")
DGX_A100 = ("NVIDIA DGX A100 User Guide, Introduction to the NVIDIA DGX A100 System "
            "(https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html)")
DGX_1 = ("NVIDIA DGX-1 with Tesla V100 System Architecture white paper, WP-08437-002 "
         "(https://images.nvidia.com/content/pdf/dgx1-v100-system-architecture-whitepaper.pdf)")
# Nodes as NVIDIA's DGX servers build them: eight SXM GPUs on one NVLink/NVSwitch fabric, and one compute-fabric
# NIC per GPU (DGX-1: four 100 Gb/s EDR NICs for eight GPUs). Bandwidth per device per direction, bytes/s.
MI300X_PLATFORM = "gpu.blog, Instinct MI300X (https://gpu.blog/gpus/instinct-mi300x-mi300x)"
NODE_TOPOLOGY = {
    "nvidia-b200": (8, 50e9, f"{DGX_BASEPOD}: DGX B200, eight B200, 8x single-port ConnectX-7 up to 400 Gb/s"),
    "nvidia-h200-sxm": (8, 50e9, f"{DGX_BASEPOD}: DGX H200, eight Hopper GPUs, eight single-port ConnectX-7 up to "
                                  "400 Gb/s"),
    "nvidia-h100-sxm": (8, 50e9, f"{DGX_BASEPOD}: DGX H100, eight Hopper GPUs, eight single-port ConnectX-7 up to "
                                  "400 Gb/s"),
    "nvidia-a100-80gb-sxm": (8, 25e9, f"{DGX_A100}: eight A100, 8x single-port ConnectX-6 VPI 200 Gb/s HDR InfiniBand"),
    "nvidia-a100-40gb-sxm": (8, 25e9, f"{DGX_A100}: eight A100, 8x single-port ConnectX-6 VPI 200 Gb/s HDR InfiniBand"),
    "nvidia-v100-sxm2-32gb": (8, 6.25e9, f"{DGX_1}: eight V100 in a hybrid cube-mesh, four 100 Gb/s EDR InfiniBand "
                                         "ports (50 GB/s for eight GPUs)"),
    "amd-mi300x": (8, 50e9, f"{MI300X_PLATFORM}: a fully connected eight-GPU xGMI mesh (the MI300X platform), at most "
                            "eight GPUs a node, scale-out over InfiniBand NDR or RoCE v2 (400 Gb/s a port, a NIC a GPU)"),
}

# Scale-up switches that reduce in the network (NVLink SHARP): an all-reduce inside the node is bounded at half a
# ring's bytes (service/core/training/collectives.py, Link.collective_time_s). The Blackwell parts, entered by hand in
# service/data/devices.json, carry the same citation there.
NVLINK_SHARP = ("NVIDIA H100 Tensor Core GPU Architecture whitepaper (https://resources.nvidia.com/en-us-tensor-core/"
                "gtc22-whitepaper-hopper): third-generation NVSwitch performs NVLink SHARP in-network reductions "
                "and multicast, as every NVSwitch generation since (HGX H100/H200, HGX B200/B300, GB200/GB300 "
                "NVL72); measured: AIConfigurator 0.12.0's all-reduces at 8 ranks on H100 and H200 ran 2-4.5 % "
                "under a ring's bytes at 450 GB/s for 0.5-1 GB buffers (tests/data/aiconfigurator_collectives.json)")
IN_NETWORK_REDUCTION = ("nvidia-h100-sxm", "nvidia-h200-sxm", "nvidia-b200")


def convert(device: dict) -> dict:
    memory, compute = device["memory"], device["compute"]
    on_chip = device.get("on_chip_bandwidth") or {}
    cache = device.get("cache") or {}
    peaks = [
        {"dtype": dtype, "unit": unit, "flops_per_s": round(value * 1e12), "citation": citation(device, f"peak_dense.{key}")}
        for key, (dtype, unit) in PEAK_KEYS.items()
        if (value := device["peak_dense"].get(key))
    ]
    levels = [{
        "level": "hbm",
        "bandwidth_bytes_per_s": round(memory["bandwidth_gbps"] * 1e9),
        "capacity_bytes": memory["capacity_gb_nominal"] * GIB,
        "citation": citation(device, "memory.bandwidth_gbps"),
    }]
    if on_chip.get("l2_tbps_theoretical"):
        levels.append({
            "level": "l2",
            "bandwidth_bytes_per_s": round(on_chip["l2_tbps_theoretical"] * 1e12),
            "capacity_bytes": cache["l2_mb"] * MIB if cache.get("l2_mb") else None,
            "citation": citation(device, "on_chip_bandwidth.l2_tbps_theoretical"),
        })
    if on_chip.get("l1_smem_aggregate_tbps_theoretical"):
        per_sm = cache.get("l1_smem_kb_per_sm")
        levels.append({
            "level": "smem",
            "bandwidth_bytes_per_s": round(on_chip["l1_smem_aggregate_tbps_theoretical"] * 1e12),
            "capacity_bytes": per_sm * 1024 * compute["units"] if per_sm else None,
            "citation": citation(device, "on_chip_bandwidth.l1_smem_aggregate_tbps_theoretical"),
        })
    interconnect = device.get("interconnect") or {}
    scale_up = interconnect.get("scale_up") or {}
    pcie = interconnect.get("pcie") or {}
    link_gbps, link_kind, link_path = None, None, None
    if scale_up.get("gbps_unidirectional_total"):
        link_gbps, link_kind, link_path = scale_up["gbps_unidirectional_total"], scale_up.get("type"), "interconnect.scale_up"
    elif pcie.get("gbps_per_direction"):
        link_gbps, link_kind, link_path = pcie["gbps_per_direction"], f"PCIe Gen{pcie.get('gen')} x{pcie.get('lanes')}", "interconnect.pcie"
    clock = compute.get("boost_clock_ghz")
    citations = {
        "memory_capacity_bytes": citation(device, "memory.capacity_gb_nominal"),
        "sm_count": citation(device, "compute.units"),
        "boost_clock_hz": citation(device, "compute.boost_clock_ghz"),
    }
    if device.get("tdp_w"):
        citations["tdp_w"] = citation(device, "tdp_w")
    if link_gbps:
        citations["interconnect_bandwidth_bytes_per_s"] = citation(device, link_path)
    usable, usable_source = USABLE_MEMORY.get(device["id"], (None, None))
    if usable:
        citations["usable_memory_bytes"] = usable_source
    node_size, inter_node, node_source = NODE_TOPOLOGY.get(device["id"], (None, None, None))
    if node_size:
        citations["node_size"] = citations["inter_node_bandwidth_bytes_per_s"] = node_source
    if device["id"] in IN_NETWORK_REDUCTION:
        citations["in_network_reduction"] = NVLINK_SHARP
    return {
        "id": device["id"],
        "name": device["name"],
        "vendor": device["vendor"],
        "architecture": device.get("architecture"),
        "memory_type": memory.get("type"),
        "memory_capacity_bytes": round(memory["capacity_gb_nominal"] * GIB),
        "memory_capacity_marketing": f"{memory['capacity_gb_nominal']:g} GB",
        "memory_capacity_physical_bytes": memory["capacity_gib_physical"] * GIB if memory.get("capacity_gib_physical") else None,
        "usable_memory_bytes": usable,
        "compute_peaks": peaks,
        "memory_levels": levels,
        "sm_count": compute.get("units"),
        "compute_unit_name": compute.get("unit_name"),
        "boost_clock_hz": round(clock * 1e9) if clock else None,
        "tdp_w": device.get("tdp_w"),
        "interconnect_bandwidth_bytes_per_s": round(link_gbps * 1e9) if link_gbps else None,
        "interconnect_kind": link_kind,
        "node_size": node_size,
        "inter_node_bandwidth_bytes_per_s": inter_node,
        "in_network_reduction": True if device["id"] in IN_NETWORK_REDUCTION else None,
        "confidence": device.get("confidence"),
        "citations": citations,
    }


def main(path: str) -> None:
    collection = json.load(open(path))
    catalog = {
        "about": "Nominal (datasheet, dense) device catalog of the roofline service, in SI units. "
                 "Imported from the team's datasheet collection by scripts/import_devices.py; "
                 "each number carries its citation. memory_capacity_bytes reads the marketed GB "
                 "figure as binary GiB of the enabled memory stacks.",
        "devices": [convert(d) for d in collection["devices"]],
    }
    json.dump(catalog, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
