"""The decode step over many batch sizes at once equals the step analysed at each, MoE models included (their
routed rows read the experts a batch is expected to hit, E (1 - (1 - k/E)^T), the one term not affine in it)."""

import json

import pytest

from service.core.transformer.analysis import Evaluator, analyze_model, batch_time_curve
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes
from service.persistence.catalog import MODEL_CATALOG_DIR, nominal_device

BATCHES = [1, 2, 3, 7, 16, 100, 333, 512]


@pytest.mark.parametrize(("config", "tensor_parallel"), [
    ("Qwen__Qwen3-30B-A3B.json", 1), ("Qwen__Qwen3-30B-A3B.json", 4), ("mistralai__Mixtral-8x7B-v0.1.json", 2),
    ("deepseek-ai__DeepSeek-V3.json", 8), ("meta-llama__Llama-3.1-8B.json", 1), ("openai__gpt-oss-20b.json", 1),
])
def test_the_curve_is_the_step_at_every_batch(config, tensor_parallel):
    arch = from_hf_config(json.loads((MODEL_CATALOG_DIR / config).read_text()))
    evaluator = Evaluator(nominal_device("nvidia-h100-sxm"))
    curve = batch_time_curve(arch, evaluator, values=BATCHES, phase="decode", seq_len=3000, dtypes=ModelDTypes(),
                             tensor_parallel=tensor_parallel)
    assert curve is not None
    steps = [analyze_model(arch, evaluator, phase="decode", batch=b, seq_len=3000, dtypes=ModelDTypes(),
                           tensor_parallel=tensor_parallel, explain=False).totals.time_s for b in BATCHES]
    assert curve == pytest.approx(steps, rel=1e-12)
