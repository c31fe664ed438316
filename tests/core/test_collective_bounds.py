"""The collectives' bound held to every collective NVIDIA AIConfigurator measured on the catalog's devices
(tests/data/aiconfigurator_collectives.json, scripts/import_aiconfigurator_collectives.py): 138 tables of all-reduces
(TensorRT-LLM's, SGLang's and vLLM's kernels, and NCCL's), all-gathers and reduce-scatters over 2 to 16 ranks, from
128 elements to half a billion. The bound is the one every analysis places a collective row at: the intra-node link
topology_for builds from the catalog device, its bytes counted as the service's rows count them."""

import json
from pathlib import Path

import pytest

from service.core.roofs import NO_MEASUREMENTS
from service.core.training.collectives import Link, ring_all_reduce_bytes, ring_shard_bytes
from service.core.transformer.analysis import Evaluator
from service.core.transformer.layers import Row
from service.persistence.catalog import nominal_device
from service.translation.serving.analyses import LinkOptions
from service.translation.training.analyses import topology_for

MEASURED = json.loads((Path(__file__).parents[1] / "data" / "aiconfigurator_collectives.json").read_text())
BYTES_PER_ELEMENT = MEASURED["bytes_per_element"]
ROW_BYTES = {"allreduce": ring_all_reduce_bytes, "allgather": ring_shard_bytes, "reducescatter": ring_shard_bytes}


def intra_node_link(device_id: str) -> Link:
    link = topology_for(nominal_device(device_id), NO_MEASUREMENTS, LinkOptions("effective", None)).intra_node
    assert link is not None
    return link


def test_the_bound_is_under_every_measured_collective():
    checked = 0
    for table in MEASURED["tables"]:
        link = intra_node_link(table["device_id"])
        for elements, measured_s in table["elements_and_seconds"]:
            comm_bytes = ROW_BYTES[table["kind"]](table["ranks"], elements * BYTES_PER_ELEMENT)
            bound_s = link.collective_time_s(table["kind"], comm_bytes)
            assert bound_s <= measured_s, (table["device_id"], table["kernel"], table["kind"], table["ranks"], elements)
            checked += 1
    assert checked == sum(len(t["elements_and_seconds"]) for t in MEASURED["tables"]) > 3000


def test_an_eight_way_nvswitch_all_reduce_is_bounded_at_half_a_rings_bytes():
    """TensorRT-LLM's all-reduce of 268,435,456 bf16 elements (536,870,912 bytes) on eight H200s took 2.0469 ms. A
    ring sends 2 x 7/8 of the buffer a device, 939,524,096 bytes, 2.0878 ms at the datasheet's 450 GB/s, + 2 us:
    2.0898 ms, 2 % above the measurement. NVSwitch reduces in the network: each device's 7/8 of the buffer
    crosses its link once, 469,762,048 bytes, 1.0439 ms + 2 us = 1.0459 ms."""
    [table] = [t for t in MEASURED["tables"] if t["device_id"] == "nvidia-h200-sxm" and t["kernel"] == "trtllm"
               and t["ranks"] == 8]
    measured_s = dict(table["elements_and_seconds"])[268_435_456]
    assert measured_s == pytest.approx(2.0469e-3, rel=1e-4)
    ring_bytes = 2 * 7 / 8 * 536_870_912
    assert ring_bytes == 939_524_096
    nvswitch = intra_node_link("nvidia-h200-sxm")
    assert nvswitch.reduces_in_network and nvswitch.bandwidth_bytes_per_s == 450e9 and nvswitch.latency_s == 2e-6
    assert nvswitch.collective_time_s("allreduce", ring_bytes) == pytest.approx(2e-6 + 469_762_048 / 450e9, rel=1e-12)
    ring = Link("intra_node", 450e9, 2e-6, "nominal")
    ring_s = ring.collective_time_s("allreduce", ring_bytes)
    assert ring_s == pytest.approx(2.0898e-3, rel=1e-4) and ring_s > measured_s
    # Only an all-reduce reduces: a gather's or scatter's bytes cross the link as counted.
    assert nvswitch.collective_time_s("allgather", 469_762_048) == pytest.approx(2e-6 + 469_762_048 / 450e9)
    # A model step's tensor-parallel row is placed on the same link.
    row = Row("attn_allreduce", "allreduce", 1, comm_bytes=ring_bytes)
    placed = Evaluator(nominal_device("nvidia-h200-sxm")).evaluate(row, "decoder", 1)
    assert placed.time_s == pytest.approx(1.0459e-3, rel=1e-4)


def test_a_switch_that_does_not_reduce_keeps_the_ring_and_a_measured_link_keeps_its_own_figure():
    """The A100's NVSwitch (second generation) has no in-network reduction, and a measured link's figure is an
    all-reduce's bus bandwidth, the switch's saving already in it: both stay a ring's bytes."""
    a100 = intra_node_link("nvidia-a100-80gb-sxm")
    assert not a100.reduces_in_network
    assert a100.collective_time_s("allreduce", 6e8) == pytest.approx(a100.latency_s + 6e8 / 300e9)
    measured = Link("intra_node", 480e9, 2e-6, "measured")
    assert measured.collective_time_s("allreduce", 6e8) == pytest.approx(2e-6 + 6e8 / 480e9)
