"""Device specifications: compute peaks per (dtype, unit) and bandwidth per memory level."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from service.core.memo import read_only


class Unit(StrEnum):
    tensor = "tensor"  # matrix engines: tensor cores, MFMA units, MXUs
    vector = "vector"  # everything else: CUDA cores, SIMD lanes, VPUs


class MemoryLevelName(StrEnum):
    hbm = "hbm"  # device memory, whatever its technology (HBM, GDDR, LPDDR)
    l2 = "l2"
    smem = "smem"  # shared memory / L1, aggregated over all SMs


# A kernel launch costs a few microseconds of host and device time on current GPUs; used when a device
# names no overhead of its own (an order of magnitude, not a measured figure).
DEFAULT_LAUNCH_OVERHEAD_S = 4e-6
# The fixed cost of one collective (an all-reduce) beside its bytes / bandwidth: synchronisation and the
# first hop. It must not exceed what the fastest kernels take, or a bound on a decode step (dozens of small
# all-reduces) would sit above real runs: small 8-way all-reduces captured in a CUDA graph on an NVSwitch node
# measured 2.3-3.3 us (the team's runs, issue 25), so 2 us, just under them. (It was 5 us, an order of
# magnitude for an uncaptured NCCL ring.) Devices and requests override it (collective_latency_s).
DEFAULT_COLLECTIVE_LATENCY_S = 2e-6
# The same for a collective whose ring leaves the node (a NIC, a switch hop or two): an order of magnitude
# again, overridable per request (inter_node_latency_s).
DEFAULT_INTER_NODE_LATENCY_S = 1e-5

# Output tile (m, n) and K step of a typical tensor-core GEMM kernel, when a device names none.
DEFAULT_MATMUL_TILE = (128, 128, 64)


@dataclass(frozen=True)
class ComputePeak:
    dtype: str
    unit: Unit
    flops_per_s: float
    citation: str


@dataclass(frozen=True)
class MemoryLevel:
    level: MemoryLevelName
    bandwidth_bytes_per_s: float
    citation: str
    capacity_bytes: float | None = None


@dataclass(frozen=True)
class DeviceSpec:
    id: str
    name: str
    vendor: str
    memory_capacity_bytes: int
    compute_peaks: tuple[ComputePeak, ...]
    memory_levels: tuple[MemoryLevel, ...]
    sm_count: int | None = None
    boost_clock_hz: float | None = None
    tdp_w: float | None = None
    interconnect_bandwidth_bytes_per_s: float | None = None
    citations: dict[str, str] = field(default_factory=dict)
    matmul_tile: tuple[int, int, int] = DEFAULT_MATMUL_TILE
    launch_overhead_s: float = DEFAULT_LAUNCH_OVERHEAD_S
    collective_latency_s: float = DEFAULT_COLLECTIVE_LATENCY_S
    usable_memory_bytes: float | None = None  # what the runtime exposes; None: not published
    node_size: int | None = None  # devices that share the scale-up link (interconnect_bandwidth_bytes_per_s)
    inter_node_bandwidth_bytes_per_s: float | None = None  # per device, per direction, between nodes
    # The scale-up switch reduces in the network (NVLink SHARP, NVSwitch's third generation on): an all-reduce
    # inside the node sends each device's buffer once (training.collectives.Link).
    in_network_reduction: bool = False

    def __post_init__(self):
        # Frozen all the way down: memos key devices by identity (service/core/memo.py).
        object.__setattr__(self, "citations", read_only(self.citations))

    def link_bandwidth_bytes_per_s(self, tier: str) -> float | None:
        """The datasheet's bandwidth per device and direction of a link tier: intra_node (the scale-up link) or
        inter_node."""
        return self.interconnect_bandwidth_bytes_per_s if tier == "intra_node" else self.inter_node_bandwidth_bytes_per_s

    def peak(self, dtype: str, unit: Unit | str) -> ComputePeak | None:
        for peak in self.compute_peaks:
            if peak.dtype == dtype and peak.unit == unit:
                return peak
        return None

    def memory_level(self, level: str) -> MemoryLevel | None:
        for candidate in self.memory_levels:
            if candidate.level == level:
                return candidate
        return None
