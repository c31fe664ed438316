"""One worker's step under expert and attention data parallelism, with hand-derived bytes.

DeepSeek-V3: hidden 7,168, 256 routed experts of width 2,048, top-8, one shared expert; multi-head latent attention
(kv_lora_rank 512 + 64 rope dims cached per token); 61 layers, the first 3 dense. Activations and KV in fp8
(1 byte), weights fp8 with one fp32 scale per 128 x 128 block: 1 + 4 / 16,384 bytes a weight.
"""

import json

import pytest

from service.core.errors import CostModelError
from service.core.planning.deployment import Pool, WorkerStep, busy_attention_groups, pool_weight_bytes
from service.core.training.collectives import Link, Topology
from service.core.transformer.analysis import Evaluator
from service.core.transformer.capacity import weight_bytes
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes, busiest_device_experts, expected_active_experts
from service.core.transformer.params import model_params
from service.persistence.catalog import MODEL_CATALOG_DIR, nominal_device

DEEPSEEK = from_hf_config(json.loads((MODEL_CATALOG_DIR / "deepseek-ai__DeepSeek-V3.json").read_text()))
FP8 = ModelDTypes("fp8", "fp8", "fp8", 128 * 128, 4.0)
HIDDEN = 7168
NVLINK, SCALE_OUT = 900e9, 50e9
LATENCY, INTER_LATENCY = 2e-6, 1e-5


def worker(device_id: str, pool: Pool, node_size: int = 8) -> WorkerStep:
    device = nominal_device(device_id)
    topology = Topology(node_size, Link("intra_node", NVLINK, LATENCY, "nominal"),
                        Link("inter_node", SCALE_OUT, INTER_LATENCY, "nominal"))
    return WorkerStep(DEEPSEEK, Evaluator(device), topology, pool, FP8)


def moe_rows(step: WorkerStep, batch: int) -> dict[str, object]:
    """The rows of one MoE layer of a decode step of `batch` sequences per group, by name."""
    layers = {label: rows for label, _, rows in step.rows(batch=batch, q_len=1, kv_len=1025)}
    return {row.name: row for row in layers["moe layers"]}


def test_expert_parallel_dispatch_and_combine_bytes():
    """8 B200s, experts over all 8, one attention group a device (d = 8), 8 sequences a group: the worker holds 64
    tokens, 8 a device. Each sends its 8 tokens to their 8 experts' devices, 7 in 8 of them elsewhere:
    8 x 8 x 7,168 x 1 byte x 7/8 = 401,408 bytes, in the dispatch and again in the combine."""
    rows = moe_rows(worker("nvidia-b200", Pool(1, 8, 8, 8)), batch=8)
    assert rows["moe_dispatch"].comm_bytes == 8 * 8 * HIDDEN * 7 / 8 == 401_408
    assert rows["moe_combine"].comm_bytes == 401_408
    # A group of one device runs its attention and shared expert whole: no all-reduce at all.
    assert "attn_allreduce" not in rows and "mlp_allreduce" not in rows
    # Routed rows on a device: 64 tokens x 8 choices / 8 devices = 64; its 32 experts, of which
    # 32 x (1 - (1 - 8/256)^64) = 27.80 are expected to be hit, each read once (gate and up: 4,096 x 7,168).
    gate_up = rows["experts_gate_up_proj"].cost
    active = 32 * (1 - (31 / 32) ** 64)
    assert active == pytest.approx(27.80, abs=0.01)
    assert gate_up.flops == 2 * 64 * 4096 * HIDDEN
    assert gate_up.weight_bytes_read == pytest.approx(active * 4096 * HIDDEN * (1 + 4 / 16384))


def test_without_attention_data_parallelism_each_device_dispatches_its_share():
    """d = 1: the 8 devices hold the same 8 tokens after the attention's all-reduce; each dispatches one of them:
    1 x 8 x 7,168 x 7/8 = 50,176 bytes. The attention block ends in a ring all-reduce over the 8 of
    2 x 7/8 x 8 x 7,168 = 100,352 bytes a device."""
    rows = moe_rows(worker("nvidia-b200", Pool(1, 8, 8, 1)), batch=8)
    assert rows["moe_dispatch"].comm_bytes == 50_176
    assert rows["attn_allreduce"].comm_bytes == 2 * 7 / 8 * 8 * HIDDEN == 100_352


def test_attention_groups_gather_the_tokens_for_width_split_experts():
    """d = 8 and e = 1: the MLP splits every expert's width 8 ways, so it first gathers the 8 groups' tokens
    (64 of them) and scatters the outputs back: 7/8 x 64 x 7,168 = 401,408 bytes each way."""
    rows = moe_rows(worker("nvidia-b200", Pool(1, 8, 1, 8)), batch=8)
    assert rows["mlp_all_gather"].comm_bytes == rows["mlp_reduce_scatter"].comm_bytes == 7 / 8 * 64 * HIDDEN
    assert rows["experts_gate_up_proj"].cost.flops == 2 * 64 * 8 * (2 * 2048 // 8) * HIDDEN


def test_requests_fewer_than_attention_groups_leave_groups_idle():
    """4 workers of 4 attention groups (16 groups): 2 requests busy one group on each of 2 workers; 6 busy 2 groups
    on the busiest worker (ceil(6 / 4)); from 13 (ceil(13 / 4) = 4) every group of the busiest worker is busy
    (None: as with no count given). One worker of 8 groups at 3 requests: 3 busy. Without attention data
    parallelism a worker is one group: every request count leaves all its groups (one) busy."""
    pool = Pool(4, 4, 4, 4)
    assert [busy_attention_groups(c, pool) for c in (1, 2, 5, 6, 12, 13, 16, 64)] == [1, 1, 2, 2, 3, None, None, None]
    assert busy_attention_groups(3, Pool(1, 8, 8, 8)) == 3
    assert busy_attention_groups(1, Pool(3, 8, 8, 1)) is None  # 3 groups of one: the busy one is whole


def test_an_idle_attention_group_adds_no_tokens_to_the_experts():
    """8 B200s, experts over all 8, d = 8, one sequence in 2 of the 8 groups: the worker holds 2 tokens, not 8.
    Device shares round down to at least 1: 2 x 8 / 8 = 2 routed token rows, max(1, 2 // 8) = 1 token dispatched:
    1 x 8 x 7,168 x 7/8 = 50,176 bytes. Experts hit on a device: 32 x (1 - (31/32)^2) = 1.97 (8 tokens: 7.13), each
    read whole, so the layer reads 3.6 x fewer expert weights than with every group counted busy."""
    step = worker("nvidia-b200", Pool(1, 8, 8, 8))
    layers = {label: rows for label, _, rows in step.rows(batch=1, q_len=1, kv_len=1025, busy_groups=2)}
    rows = {row.name: row for row in layers["moe layers"]}
    assert rows["moe_dispatch"].comm_bytes == 8 * HIDDEN * 7 / 8 == 50_176
    gate_up = rows["experts_gate_up_proj"].cost
    assert gate_up.flops == 2 * 2 * 4096 * HIDDEN
    assert gate_up.weight_bytes_read == pytest.approx(32 * (1 - (31 / 32) ** 2) * 4096 * HIDDEN * (1 + 4 / 16384))
    every = moe_rows(step, batch=1)["experts_gate_up_proj"].cost
    assert every.weight_bytes_read / gate_up.weight_bytes_read == pytest.approx((1 - (31 / 32) ** 8) / (1 - (31 / 32) ** 2))
    # The attention of a busy group is the same either way: one sequence.
    assert rows["q_a_proj"].cost == moe_rows(step, batch=1)["q_a_proj"].cost
    assert rows["attention"].cost == moe_rows(step, batch=1)["attention"].cost
    # All busy: the same rows as not saying.
    assert step.rows(batch=1, q_len=1, kv_len=1025, busy_groups=8) == step.rows(batch=1, q_len=1, kv_len=1025)


def test_one_requests_prefill_is_one_groups():
    """A 1,024-token prompt in one of the 8 groups: 1,024 tokens x 8 choices / 8 devices = 1,024 routed token rows a
    device, against 8,192 with every group prefilling one; the step is the faster."""
    step = worker("nvidia-b200", Pool(1, 8, 8, 8))
    prompt = {"batch": 1, "q_len": 1024, "kv_len": 1024}
    one = {label: rows for label, _, rows in step.rows(**prompt, busy_groups=1)}["moe layers"]
    every = {label: rows for label, _, rows in step.rows(**prompt)}["moe layers"]
    assert {r.name: r for r in one}["experts_gate_up_proj"].cost.flops == 2 * 1024 * 4096 * HIDDEN
    assert {r.name: r for r in every}["experts_gate_up_proj"].cost.flops == 2 * 8192 * 4096 * HIDDEN
    assert step.time_s(**prompt, busy_groups=1) < step.time_s(**prompt)


def test_idle_groups_gather_no_tokens_for_width_split_experts():
    """d = 8, e = 1, 3 busy groups of one sequence: 3 tokens gathered, 7/8 x 3 x 7,168 bytes each way, and the
    experts' width split 8 ways as with every group busy."""
    layers = {label: rows for label, _, rows in worker("nvidia-b200", Pool(1, 8, 1, 8)).rows(
        batch=1, q_len=1, kv_len=1025, busy_groups=3)}
    rows = {row.name: row for row in layers["moe layers"]}
    assert rows["mlp_all_gather"].comm_bytes == rows["mlp_reduce_scatter"].comm_bytes == 7 / 8 * 3 * HIDDEN
    assert rows["experts_gate_up_proj"].cost.flops == 2 * 3 * 8 * (2 * 2048 // 8) * HIDDEN


def test_an_nvl72_worker_of_16_all_reduces_on_nvlink():
    """16 GB200s in a 72-GPU NVLink rack, tensor parallel over all 16: each all-reduce of 4 tokens x 7,168 fp8
    values moves 2 x 15/16 x 28,672 = 53,760 bytes a device at 900 GB/s, plus 2 us: 2.0597 us; over the 50 GB/s
    scale-out link it would take 11.08 us."""
    step = worker("nvidia-gb200", Pool(1, 16, 1, 1), node_size=72)
    results = {(r.group, r.name): r for r in step.evaluate(batch=4, q_len=1, kv_len=1025)}
    allreduce = results[("moe layers", "attn_allreduce")]
    assert allreduce.bytes == 2 * 15 / 16 * 4 * HIDDEN == 53_760
    assert allreduce.time_s == pytest.approx(LATENCY + 53_760 / NVLINK)
    assert allreduce.time_s < INTER_LATENCY + 53_760 / SCALE_OUT


def test_a_worker_beyond_its_node_crosses_the_scale_out_link():
    """16 B200s in 8-GPU nodes: the same all-reduce runs at 50 GB/s with the inter-node latency."""
    step = worker("nvidia-b200", Pool(1, 16, 1, 1))
    results = {(r.group, r.name): r for r in step.evaluate(batch=4, q_len=1, kv_len=1025)}
    assert results[("moe layers", "attn_allreduce")].time_s == pytest.approx(INTER_LATENCY + 53_760 / SCALE_OUT)


def test_weights_split_experts_over_the_worker_and_the_rest_over_the_group():
    """Routed experts: 58 MoE layers x 256 experts x (2 x 2,048 gate-up + 2,048 down) x 7,168 = 653,908,770,816
    weights, 1 + 4/16,384 bytes each, split over the 8 devices either way. The rest (N bytes in all) is split 8 ways
    at d = 1 and held whole by each device at d = 8 (its group is itself): the two differ by 7/8 of N."""
    routed = 58 * 256 * 3 * 2048 * HIDDEN
    assert model_params(DEEPSEEK).routed_experts == routed == 653_908_770_816
    routed_bytes = routed * (1 + 4 / 16384)
    split = pool_weight_bytes(DEEPSEEK, FP8, Pool(1, 8, 8, 1))
    rest = 8 * split - routed_bytes
    assert split == pytest.approx(weight_bytes(DEEPSEEK, FP8, 8))
    assert pool_weight_bytes(DEEPSEEK, FP8, Pool(1, 8, 8, 8)) == pytest.approx(rest + routed_bytes / 8)


@pytest.mark.parametrize("pool", [Pool(1, 8, 8, 8), Pool(1, 8, 1, 8), Pool(1, 8, 1, 1), Pool(2, 4, 4, 4)])
def test_the_decode_curve_is_the_step_at_every_batch(pool):
    """Experts over the worker with one group a device, width-split experts gathered from 8 groups, plain tensor
    parallelism: the step over many batches at once equals the step analysed at each."""
    step = worker("nvidia-b200", pool)
    batches = [1, 2, 3, 5, 16, 64, 100]
    assert step.curve_is_exact()
    assert step.decode_curve(batches, kv_len=2049) == pytest.approx(
        [step.time_s(batch=b, q_len=1, kv_len=2049) for b in batches], rel=1e-12)


MIXTRAL = from_hf_config(json.loads((MODEL_CATALOG_DIR / "mistralai__Mixtral-8x7B-v0.1.json").read_text()))


@pytest.mark.parametrize("model", [DEEPSEEK, MIXTRAL], ids=["deepseek-v3 top-8 of 256", "mixtral top-2 of 8"])
@pytest.mark.parametrize("pool", [Pool(1, 8, 8, 1), Pool(1, 4, 4, 1), Pool(1, 8, 8, 2), Pool(1, 2, 2, 1)])
@pytest.mark.parametrize("q_len", [1, 3])
def test_the_rounded_decode_curve_is_the_step_at_every_batch(model, pool, q_len):
    """Experts over fewer attention groups than devices: a device's share of the tokens rounds down (at least 1),
    so the curve is drawn through two steps of each class of batches a period apart. Hand-worked for Pool(1, 8, 8,
    1) at q_len 1: a batch of b dispatches max(1, b // 8) tokens a device, constant over 1-7 then stepping every 8
    batches, so the classes are b mod 8 from b = 8 on. Over every batch from 1 to 70 the curve equals each step
    analysed, with a verification step of 3 tokens too (its period 8 / gcd(8, 3) = 8, from b = 3)."""
    step = WorkerStep(model, Evaluator(nominal_device("nvidia-b200")), worker("nvidia-b200", pool).topology, pool,
                      FP8)
    assert not step.curve_is_exact()
    batches = list(range(1, 71))
    analysed = [step.time_s(batch=b, q_len=q_len, kv_len=2049, scored_tokens=q_len) for b in batches]
    assert step.decode_curve(batches, kv_len=2049, q_len=q_len, scored_tokens=q_len) == pytest.approx(analysed,
                                                                                                    rel=1e-12)
    # The rounding is real: one curve through the steps at 1 and 2, as for the layouts that do not round, misses.
    through_one_and_two = step._curve(batches, (1, 2), {"q_len": q_len, "kv_len": 2049, "scored_tokens": q_len,
                                                        "layers": None})
    assert through_one_and_two != pytest.approx(analysed, rel=1e-6)


ROUNDED_CURVE_SCRIPT = """
import json
from service.core.planning.deployment import Pool, WorkerStep
from service.core.training.collectives import Link, Topology
from service.core.transformer.analysis import Evaluator
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes
from service.persistence.catalog import MODEL_CATALOG_DIR, nominal_device
model = from_hf_config(json.loads((MODEL_CATALOG_DIR / "mistralai__Mixtral-8x7B-v0.1.json").read_text()))
device = nominal_device("amd-mi300x")
topology = Topology(8, Link("intra_node", 448e9, 2e-6, "nominal"), Link("inter_node", 50e9, 1e-5, "nominal"))
step = WorkerStep(model, Evaluator(device), topology, Pool(1, 4, 4, 1), ModelDTypes())
print([v.hex() for v in step.decode_curve(list(range(1, 200)), kv_len=4499)])
"""


# OpenBLAS's kernels a test may force, and the instructions each needs (forced on a CPU without them, a process dies
# of SIGILL: the AMD EPYC machines have AVX2 and no AVX-512).
BLAS_CORES = [("SkylakeX", "avx512f", "2"), ("Haswell", "avx2", "1"), ("Sandybridge", "avx", "2")]


def test_the_rounded_curve_is_the_same_bits_under_any_blas():
    """A plan's choices at an SLO's edge follow the last bits of its curves, so those bits must not follow the
    machine: the rounded curve of Mixtral on four MI300Xs (the golden plan that differed between a 2-core AVX-512
    machine and one BLAS thread) computed in fresh processes under OpenBLAS's SkylakeX, Haswell and Sandybridge
    kernels (those this CPU can run: at least two), on one thread and on two, is the same list of floats, bit for
    bit."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").exists() else set()
    runnable = [(core, threads) for core, needs, threads in BLAS_CORES if needs in flags]
    if len(runnable) < 2:
        pytest.skip(f"this CPU runs {len(runnable)} of OpenBLAS's forced kernels: nothing to compare")
    outputs = set()
    for core, threads in runnable:
        env = {**os.environ, "OPENBLAS_CORETYPE": core, "OPENBLAS_NUM_THREADS": threads}
        done = subprocess.run([sys.executable, "-c", ROUNDED_CURVE_SCRIPT], env=env, capture_output=True, text=True,
                              check=True, timeout=120)
        outputs.add(done.stdout)
    assert len(outputs) == 1


def test_the_busiest_device_formula_by_hand():
    """4 experts, top-1, over 2 devices of 2 experts each, one token: each expert is hit with p = 1 - (3/4)^1 = 1/4,
    a device's hits ~ Binomial(2, 1/4): P(0) = 9/16, P(1) = 6/16, so F(0) = 9/16 and F(1) = 15/16, and the larger of
    two devices' expects (1 - (9/16)^2) + (1 - (15/16)^2) = 175/256 + 31/256 = 206/256. (The one token hits exactly
    one expert, so the true busiest device holds 1: the independence the formula assumes costs a fifth here, with
    one expert a token; with DeepSeek-V3's eight the next test finds it within 2 %.)"""
    assert busiest_device_experts(1, 4, 1, 2) == pytest.approx(206 / 256, rel=1e-12)
    # Every expert hit: each device holds all of its own, whatever the routing.
    assert busiest_device_experts(10_000, 256, 8, 8) == pytest.approx(32)


@pytest.mark.parametrize("tokens", [1, 4, 16, 64])
def test_the_busiest_device_against_routing_drawn_at_random(tokens):
    """DeepSeek-V3's routing (top-8 of 256, each token's eight distinct) over 8 devices of 32 experts, drawn 4,000
    times: the formula is within 2 % of the drawn mean of the busiest device's experts hit, which is above the mean
    device's (what the bound reads) wherever some device is missed."""
    import numpy as np

    rng = np.random.default_rng(7)
    busiest = []
    for _ in range(4000):
        hit = np.zeros(256, dtype=bool)
        for _ in range(tokens):
            hit[rng.choice(256, 8, replace=False)] = True
        busiest.append(hit.reshape(8, 32).sum(axis=1).max())
    assert busiest_device_experts(tokens, 256, 8, 8) == pytest.approx(float(np.mean(busiest)), rel=0.02)
    assert busiest_device_experts(tokens, 256, 8, 8) > 1.05 * expected_active_experts(tokens, 256, 8) / 8


@pytest.mark.parametrize("pool", [Pool(1, 8, 8, 1, busiest_experts=True), Pool(1, 8, 8, 8, busiest_experts=True),
                                  Pool(1, 4, 4, 1, busiest_experts=True)])
def test_the_busiest_device_curve_is_the_step_at_every_batch(pool):
    """The experts read as the busiest device holds them: the curve over batches (through two steps, or two of each
    rounding class) equals each step analysed, and each step is above the bound's (the mean device) at small batches
    and equal to it once every expert is hit."""
    from dataclasses import replace

    step = worker("nvidia-b200", pool)
    bound = worker("nvidia-b200", replace(pool, busiest_experts=False))
    batches = list(range(1, 41)) + [512]
    analysed = [step.time_s(batch=b, q_len=1, kv_len=2049) for b in batches]
    assert step.decode_curve(batches, kv_len=2049) == pytest.approx(analysed, rel=1e-12)
    assert step.time_s(batch=4, q_len=1, kv_len=2049) > 1.1 * bound.time_s(batch=4, q_len=1, kv_len=2049)
    assert step.time_s(batch=512, q_len=1, kv_len=2049) == pytest.approx(bound.time_s(batch=512, q_len=1, kv_len=2049),
                                                                        rel=1e-3)


def test_the_rounded_curve_falls_back_to_its_classes_where_the_rows_do_not_line_up(monkeypatch):
    """Where the rows solved from a few steps cannot be read (their rows do not line up, or the step checked beside
    them disagrees), the curve is drawn class by class, two steps a class: still each step analysed."""
    from service.core.planning import deployment

    monkeypatch.setattr(deployment, "_rows_through", lambda *_, **__: None)
    step = worker("nvidia-b200", Pool(1, 8, 8, 1))
    batches = list(range(1, 41))
    assert step.decode_curve(batches, kv_len=2049) == pytest.approx(
        [step.time_s(batch=b, q_len=1, kv_len=2049) for b in batches], rel=1e-12)


def _catalog_moe_models() -> list:
    models = []
    for path in sorted(MODEL_CATALOG_DIR.glob("*.json")):
        config = json.loads(path.read_text())
        if "model_type" not in config:
            continue
        arch = from_hf_config(config)
        if arch.moe is not None:
            models.append(pytest.param(arch, id=path.stem))
    return models


@pytest.mark.parametrize("model", _catalog_moe_models())
def test_every_catalog_moe_models_rounded_curve_is_its_steps(model, monkeypatch):
    """The rounded curve solved from a few steps (WorkerStep._rounded_curve) on every MoE model of the catalog, with
    16 devices of experts and 2 attention groups, verifying 2 tokens a sequence, and with the busiest device's
    experts over 8: equal to each step analysed at every batch from 1 to 70 and at 512, and never through the
    class-by-class fallback."""
    from service.core.planning import deployment

    fallback: list[int] = []
    original = deployment.WorkerStep._class_curve
    monkeypatch.setattr(deployment.WorkerStep, "_class_curve",
                        lambda self, batches, step: fallback.append(1) or original(self, batches, step))
    checked = 0
    for pool, q_len in ((Pool(1, 16, 16, 2), 2), (Pool(1, 8, 8, 1, busiest_experts=True), 1)):
        try:
            deployment.check_pool(model, pool)
        except CostModelError:
            continue
        checked += 1
        step = WorkerStep(model, Evaluator(nominal_device("nvidia-b200")), worker("nvidia-b200", pool).topology, pool,
                          FP8)
        batches = [*range(1, 71), 512]
        curve = step.decode_curve(batches, kv_len=3001, q_len=q_len, scored_tokens=q_len)
        assert not fallback
        assert curve == pytest.approx([step.time_s(batch=b, q_len=q_len, kv_len=3001, scored_tokens=q_len)
                                       for b in batches], rel=1e-12)
    assert checked  # each model takes one of the two layouts at least
