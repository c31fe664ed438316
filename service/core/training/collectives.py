"""The collectives of data, tensor and pipeline parallelism: bytes per device, and the link tier they cross.

Ranks are laid out tensor-parallel fastest, then data-parallel, then pipeline stages (Megatron's order),
so a tensor-parallel group is tp consecutive devices, a data-parallel group dp devices tp apart and a
pipeline group pp devices tp x dp apart. A group stays inside one node when the devices it spans fit in
a node and nodes hold whole groups; otherwise its ring runs at the slower inter-node link.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.errors import CostModelError
from service.core.hardware import DeviceSpec

ALL_REDUCE_KINDS = frozenset({"allreduce", "all_reduce"})  # a layer row's kind, a training collective's


@dataclass(frozen=True)
class Link:
    tier: str  # "intra_node" or "inter_node"
    bandwidth_bytes_per_s: float  # per device, per direction
    latency_s: float  # fixed cost of one collective or send
    source: str  # "nominal", "measured" or "request"
    # The switch reduces in the network (DeviceSpec.in_network_reduction), and the bandwidth is the datasheet's: an
    # all-reduce's buffer then crosses each device's link once, not a ring's twice. (A measured link's figure is an
    # all-reduce's bus bandwidth, which already holds what the switch saved.)
    reduces_in_network: bool = False

    @classmethod
    def nominal(cls, device: DeviceSpec, tier: str, latency_s: float) -> Link | None:
        """The device's datasheet link of `tier` (None where it names none), with its switch's in-network reduction
        where the tier is the scale-up one."""
        bandwidth = device.link_bandwidth_bytes_per_s(tier)
        if bandwidth is None:
            return None
        return cls(tier, bandwidth, latency_s, "nominal",
                   reduces_in_network=tier == "intra_node" and device.in_network_reduction)

    def collective_time_s(self, kind: str, bytes_per_device: float) -> float:
        """One collective's bound on this link: its latency plus its bytes over the bandwidth, an all-reduce's
        (counted as a ring's, 2 (t-1)/t of the buffer) halved where the switch reduces: each device sends its
        (t-1)/t of the buffer once, the least any reduction sends (measured: NVSwitch's all-reduces of 0.5-1 GB
        on eight H100s or H200s ran 2-4.5 % under a ring's bytes at the datasheet's 450 GB/s)."""
        moved = bytes_per_device / 2 if self.reduces_in_network and kind in ALL_REDUCE_KINDS else bytes_per_device
        return self.latency_s + moved / self.bandwidth_bytes_per_s


@dataclass(frozen=True)
class Topology:
    node_size: int
    intra_node: Link | None
    inter_node: Link | None

    def link_for(self, extent: int, group: str) -> Link:
        """The link a group of devices spanning `extent` consecutive ranks runs on."""
        inside = extent <= self.node_size and self.node_size % extent == 0
        link = self.intra_node if inside else self.inter_node
        if link is None:
            tier = "intra-node" if inside else "inter-node"
            field = "intra_node_bandwidth_bytes_per_s" if inside else "inter_node_bandwidth_bytes_per_s"
            raise CostModelError(field, f"the {group} group spans {extent} ranks ({'inside' if inside else 'beyond'} "
                                        f"a node of {self.node_size}) and the device has no {tier} link bandwidth; "
                                        f"give {field} in the request or on the device")
        return link


def in_network_reduction_note(device_id: str) -> str:
    """What an answer says where its intra-node link reduces in the network."""
    return (f"{device_id}'s scale-up switch reduces in the network (NVLink SHARP): an all-reduce inside a node is "
            "bounded at half a ring's bytes on the nominal link (each device's (t-1)/t of the buffer crossing it "
            "once); its bytes are still counted as a ring's")


def ring_all_reduce_bytes(devices: int, buffer_bytes: float) -> float:
    """Bytes each device sends (and receives) in a ring all-reduce: a reduce-scatter then an all-gather,
    each moving (n - 1)/n of the buffer."""
    return 2 * (devices - 1) / devices * buffer_bytes


def ring_shard_bytes(devices: int, buffer_bytes: float) -> float:
    """Bytes each device sends in a ring reduce-scatter or all-gather of a buffer of `buffer_bytes`."""
    return (devices - 1) / devices * buffer_bytes


@dataclass(frozen=True)
class Collective:
    name: str
    kind: str  # all_reduce, reduce_scatter, all_gather, send_recv
    group: str  # data, tensor, pipeline
    group_size: int
    buffer_bytes: float
    bytes_per_device: float
    count: int  # per step
    link: Link
    on_critical_path: bool

    @property
    def time_s(self) -> float:
        return self.link.collective_time_s(self.kind, self.bytes_per_device)

    @property
    def total_time_s(self) -> float:
        return self.time_s * self.count
