"""The training layout search: what it enumerates, that its ranking is the roofline's, and what binds."""

import pytest

from service.core.training.schedules import Schedule
from service.core.training.search import layouts, search_layouts
from service.core.training.step import Parallelism, TrainingSetup, analyze_training
from service.core.transformer.analysis import Evaluator
from tests.core.training.test_training_step import H100, NODE, tiny


def test_the_layouts_of_four_devices_by_hand():
    # Tiny model: 2 layers, 4 heads, 2 KV heads; 16-token sequences, 8 a step, micro-batches of 1, 4 devices in a
    # node of 8. Tensor parallelism 1, 2 or 4; context parallelism 1, 2 or 4 (16 tokens split into 2c chunks);
    # pipelines of 1 or 2 stages. The (t, c, p) whose product divides 4 (and leaves a data-parallel degree that
    # divides the 8 sequences): (1,1,1) (1,1,2) (1,2,1) (1,2,2) (1,4,1) (2,1,1) (2,1,2) (2,2,1) (4,1,1): 9. The
    # three two-stage ones run 1F1B or zero bubble (interleaving 2 chunks on 2 stages needs 4 layers): 6 + 2 x 3.
    found = list(layouts(tiny(layers=2), 4, 8, 16, 1, 8, Parallelism()))
    assert len(found) == 12
    assert {(x.parallelism.tensor, x.parallelism.context, x.parallelism.pipeline) for x in found} == {
        (1, 1, 1), (1, 1, 2), (1, 2, 1), (1, 2, 2), (1, 4, 1), (2, 1, 1), (2, 1, 2), (2, 2, 1), (4, 1, 1)}
    for x in found:
        par = x.parallelism
        assert par.devices == 4 and par.sequence_parallel == (par.tensor > 1)
        # The global batch is held: micro-batches x replicas = 8 sequences.
        assert x.micro_batches * par.data == 8
    # Tensor parallelism 4 splits 2 KV heads four ways: the model refuses that layout.
    result = search_layouts(tiny(layers=2), Evaluator(H100), NODE, TrainingSetup(1, 16), 4, 8, top_n=20)
    assert (result.searched, result.refused) == (11, 1)


def test_the_ranking_is_the_roofline_step_of_each_layout():
    arch = tiny(layers=4)
    base = TrainingSetup(micro_batch_size=2, seq_len=64)
    result = search_layouts(arch, Evaluator(H100), NODE, base, 8, 32, top_n=5)
    times = [p.step.step_time_s for p in result.ranked]
    assert times == sorted(times) and len(times) == 5
    for placed in result.ranked:
        direct = analyze_training(arch, Evaluator(H100), NODE, TrainingSetup(
            micro_batch_size=2, seq_len=64, gradient_accumulation_steps=placed.layout.micro_batches,
            parallelism=placed.layout.parallelism, schedule=placed.layout.schedule, recompute=placed.recompute))
        assert direct.step_time_s == placed.step.step_time_s and direct.memory.fits
        assert direct.tokens_per_step == 32 * 64
    assert result.faster_unfitting is None and result.least_memory is None


def test_memory_binds_when_the_fastest_layout_does_not_fit():
    arch = tiny(layers=4)
    free = search_layouts(arch, Evaluator(H100), NODE, TrainingSetup(2, 64), 8, 32, top_n=1)
    fastest = free.ranked[0]
    # Just under what the fastest layout needs: it no longer fits, something slower does.
    tight = TrainingSetup(2, 64, usable_bytes=fastest.step.memory.required_bytes * 0.999)
    bound = search_layouts(arch, Evaluator(H100), NODE, tight, 8, 32, top_n=1)
    assert bound.faster_unfitting is not None and not bound.faster_unfitting.step.memory.fits
    assert bound.faster_unfitting.step.step_time_s == pytest.approx(fastest.step.step_time_s)
    assert bound.ranked[0].step.step_time_s >= fastest.step.step_time_s
    # With almost no memory nothing fits: the search says which layout came closest.
    starved = search_layouts(arch, Evaluator(H100), NODE, TrainingSetup(2, 64, usable_bytes=1.0), 8, 32, top_n=1)
    assert starved.ranked == () and starved.least_memory is not None
    assert starved.least_memory.recompute == "full"


def test_interleaving_is_searched_where_the_layers_allow_it():
    found = list(layouts(tiny(layers=8), 8, 8, 64, 1, 16, Parallelism(zero_stage=1)))
    schedules = {(x.parallelism.pipeline, x.schedule) for x in found}
    assert (4, Schedule("interleaved", 2)) in schedules and (8, Schedule("interleaved", 2)) not in schedules
    assert all(x.parallelism.zero_stage == 1 and x.parallelism.expert == 1 for x in found)
    assert Parallelism(1, 1, 8, 1) in {x.parallelism for x in found}
