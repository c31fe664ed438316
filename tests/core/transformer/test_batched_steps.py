"""Model steps costed as arrays (core/transformer/batched_steps.py) must be, step by step, exactly what analyze_model
answers alone: the same rows and totals to the last bit, the same types, the same notes. The arrays run the scalar
cost models themselves; these tests hold them to it across models, devices, dtypes, parallelism and lengths, and
check that what the arrays cannot compute exactly is left out."""

import random

import pytest

from service.core.errors import CostModelError
from service.core.memo import by_value, costing_arrays
from service.core.transformer.analysis import Evaluator, analyze_model
from service.core.transformer.batched_steps import NotVectorisable, SteppedRows, vectorisable
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes
from service.persistence.catalog import model_catalog, nominal_device

CONFIGS = {entry["id"]: entry["config"] for entry in model_catalog()}
DEVICES = ["nvidia-h100-sxm", "nvidia-a100-80gb-sxm", "amd-mi300x", "nvidia-l40s"]
DTYPES = [ModelDTypes(), ModelDTypes(weights="int4", weight_group_size=128),
          # a group scale that is not a power of two: each product rounds, and must round as Python rounds it
          ModelDTypes(weights="int4", weight_group_size=100, weight_scale_bytes=3.0),
          ModelDTypes(weights="fp8", activations="fp8", kv_cache="fp8"), ModelDTypes(kv_cache="int8")]


def alone(arch, evaluator, **step):
    try:
        return analyze_model(arch, evaluator, **step)
    except CostModelError:
        return None


@pytest.mark.parametrize("model_id", sorted(m for m in CONFIGS if vectorisable(from_hf_config(CONFIGS[m]))))
def test_every_step_is_the_step_costed_alone(model_id):
    arch = from_hf_config(CONFIGS[model_id])
    evaluators = [Evaluator(nominal_device(device)) for device in DEVICES]
    rng = random.Random(model_id)
    compared = 0
    for phase in ("prefill", "decode"):
        for tensor_parallel in (1, 2, 4):
            for dtypes in DTYPES:
                # Lengths from one token to past most models' positions, batches from 1 to 300: small and huge
                # counts, windows reached and not.
                batch = [rng.choice([1, 2, 3, rng.randint(1, 300)]) for _ in range(24)]
                seq_len = [rng.choice([1, 2, 3, rng.randint(1, 5000), rng.randint(1, 200_000)]) for _ in range(24)]
                which = [rng.randrange(len(evaluators)) for _ in range(24)]
                options = dict(phase=phase, dtypes=dtypes, tensor_parallel=tensor_parallel,
                               attention_implementation=rng.choice(["flash", "naive"]))
                try:
                    steps = SteppedRows(arch, evaluators, which, batch=batch, seq_len=seq_len, **options)
                except CostModelError:  # heads not divisible by the parallelism, a device without fp8: refused alone too
                    assert any(alone(arch, evaluators[at], batch=b, seq_len=s, **options) is None
                               for at, b, s in zip(which, batch, seq_len))
                    continue
                for index in range(24):
                    single = alone(arch, evaluators[which[index]], batch=batch[index], seq_len=seq_len[index], **options)
                    if not steps.exact[index]:
                        continue
                    together = steps.result(index)
                    # repr: every float to its last bit; the types too (a count written as 1.0, never 1).
                    assert repr(together) == repr(single), (model_id, options, batch[index], seq_len[index])
                    assert [type(value) for row in together.rows for value in row] == \
                        [type(value) for row in single.rows for value in row]
                    compared += 1
    assert compared > 400, compared


def test_steps_past_the_exact_domain_are_left_out():
    # Llama 3.1 70B prefill of 32 x 131,072 tokens: 2 x 70e9 x 4.2e6 = 5.9e17 FLOPs, past 2**53 (9.0e15);
    # 8 x 4,096 tokens (4.6e15) is within it.
    arch = from_hf_config(CONFIGS["llama-3.1-70b"])
    evaluator = Evaluator(nominal_device("nvidia-h100-sxm"))
    steps = SteppedRows(arch, [evaluator], [0, 0], phase="prefill", batch=[32, 8], seq_len=[131_072, 4096],
                        dtypes=ModelDTypes(), tensor_parallel=1, attention_implementation="flash")
    assert steps.exact.tolist() == [False, True]
    assert repr(steps.result(1)) == repr(analyze_model(arch, evaluator, phase="prefill", batch=8, seq_len=4096,
                                                       dtypes=ModelDTypes()))


def test_what_the_arrays_cannot_cost_is_refused():
    options = dict(phase="decode", batch=[1, 2], seq_len=[10, 20], dtypes=ModelDTypes(), attention_implementation="flash")
    mixtral = from_hf_config(CONFIGS["mixtral-8x7b"])  # expected experts hit: not written for arrays
    with pytest.raises(NotVectorisable):
        SteppedRows(mixtral, [Evaluator(nominal_device("nvidia-h100-sxm"))], [0, 0], tensor_parallel=1, **options)



def test_a_device_without_a_roof_leaves_out_its_own_steps_only():
    llama = from_hf_config(CONFIGS["llama-3.1-8b"])
    no_link = Evaluator(nominal_device("nvidia-a10g"))  # tensor parallel on a device without an interconnect figure
    assert not no_link.device.interconnect_bandwidth_bytes_per_s
    h100 = Evaluator(nominal_device("nvidia-h100-sxm"))
    steps = SteppedRows(llama, [no_link, h100], [0, 1, 0, 1], phase="decode", batch=[1, 2, 3, 4], seq_len=[10] * 4,
                        dtypes=ModelDTypes(), tensor_parallel=2, attention_implementation="flash")
    assert steps.exact.tolist() == [False, True, False, True]
    with pytest.raises(CostModelError):
        analyze_model(llama, no_link, phase="decode", batch=1, seq_len=10, dtypes=ModelDTypes(), tensor_parallel=2)
    assert repr(steps.result(3)) == repr(analyze_model(llama, h100, phase="decode", batch=4, seq_len=10,
                                                       dtypes=ModelDTypes(), tensor_parallel=2))
    # fp8 on the A100 (no fp8 peak) beside the H100: the same, for a missing compute roof
    a100 = Evaluator(nominal_device("nvidia-a100-80gb-sxm"))
    fp8 = ModelDTypes(weights="fp8", activations="fp8", kv_cache="fp8")
    steps = SteppedRows(llama, [a100, h100], [0, 1], phase="prefill", batch=[1, 1], seq_len=[64, 64], dtypes=fp8,
                        tensor_parallel=1, attention_implementation="flash")
    assert steps.exact.tolist() == [False, True]


def test_memoised_cost_models_compute_arrays_straight_through():
    calls = []

    @by_value(maxsize=8)
    def doubled(value):
        calls.append(value)
        return value * 2

    assert doubled(3) == 6 and doubled(3) == 6
    assert calls == [3]  # the second call was remembered
    with costing_arrays():
        assert doubled(3) == 6
    assert calls == [3, 3]  # computed again: arrays (unhashable, never asked twice) are not remembered
    assert doubled(3) == 6 and calls == [3, 3]
