"""The collectives of data, tensor and pipeline parallelism: bytes per device, and the link tier they cross.

Ranks are laid out tensor-parallel fastest, then data-parallel, then pipeline stages (Megatron's order),
so a tensor-parallel group is tp consecutive devices, a data-parallel group dp devices tp apart and a
pipeline group pp devices tp x dp apart. A group stays inside one node when the devices it spans fit in
a node and nodes hold whole groups; otherwise its ring runs at the slower inter-node link.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.core.errors import CostModelError


@dataclass(frozen=True)
class Link:
    tier: str  # "intra_node" or "inter_node"
    bandwidth_bytes_per_s: float  # per device, per direction
    latency_s: float  # fixed cost of one collective or send
    source: str  # "nominal", "measured" or "request"


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
        return self.link.latency_s + self.bytes_per_device / self.link.bandwidth_bytes_per_s

    @property
    def total_time_s(self) -> float:
        return self.time_s * self.count
