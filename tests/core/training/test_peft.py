"""LoRA and QLoRA fine-tuning steps against figures derived by hand (the derivation beside each number), and the
bound against MLPerf Training's measured Llama 2 70B LoRA steps."""

import pytest

from service.core.errors import CostModelError
from service.core.expectations.kernel_steps import KernelEvaluator
from service.core.expectations.training_checks import MLPERF_LORA, TRAINING_CHECKS
from service.core.training.peft import NF4_BYTES_PER_PARAMETER, Peft
from service.core.training.step import Parallelism, TrainingDTypes, TrainingSetup, analyze_training
from service.core.transformer.analysis import Evaluator
from service.persistence.catalog import nominal_device
from service.translation.kernels.tables import shipped_kernel_tables
from tests.core.training.test_training_at_scale import topology
from tests.core.training.test_training_step import HEAD_DIM, HEADS, HIDDEN, KV_HEADS, VOCAB, WIDTH, catalog_arch, step, tiny

RANK = 8
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
Q, KV = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM  # q_proj's outputs; k_proj's and v_proj's each


def lora(targets=ATTENTION, method="lora", **peft):
    return Peft(method, RANK, 2 * RANK, targets, **peft)


def matmul_flops(result, phase):
    return sum(p.result.flops * p.result.instances for p in result.rows
               if p.phase == phase and p.result.kind == "matmul")


def test_adapters_on_attention_add_their_products_and_drop_the_frozen_weight_gradients():
    batch, s, layers = 2, 16, 3
    tokens = batch * s
    full = step(tiny(layers), micro_batch_size=batch, seq_len=s)
    tuned = step(tiny(layers), micro_batch_size=batch, seq_len=s, peft=lora())
    # Per layer, an adapter of rank r beside a [n, k] module does 2 T r (k + n) FLOPs in the forward: A [r, k] over
    # the input, B [n, r] over A's output. q, k, v read the h-wide stream (k = h); o reads the heads' outputs.
    adapters = layers * 2 * tokens * RANK * ((HIDDEN + Q) + (HIDDEN + KV) + (HIDDEN + KV) + (Q + HIDDEN))
    assert matmul_flops(tuned, "forward") == matmul_flops(full, "forward") + adapters
    # The backward: every matmul's dX as before (the frozen ones' and the adapters'), but weight gradients for the
    # adapters only: their forward FLOPs once more.
    assert matmul_flops(tuned, "backward_activation") == matmul_flops(full, "backward_activation") + adapters
    assert matmul_flops(tuned, "backward_weight") == adapters
    assert matmul_flops(full, "backward_weight") == matmul_flops(full, "forward")
    # The frozen embedding, first in the model, has no backward at all.
    assert not any(p.result.name.startswith("embedding.") for p in tuned.rows)
    assert any(p.result.name.startswith("embedding.") for p in full.rows)


def test_trainable_parameters_gradients_and_optimizer_states_are_the_adapters():
    layers = 2
    tuned = step(tiny(layers), micro_batch_size=1, seq_len=8, peft=lora())
    # r (k + n) per adapted module: q (h + Q), k and v (h + KV each), o (Q + h).
    per_layer = RANK * ((HIDDEN + Q) + 2 * (HIDDEN + KV) + (Q + HIDDEN))
    assert per_layer == 8 * (128 + 2 * 96 + 128) == 3584
    assert tuned.trainable_parameters == layers * per_layer
    memory = tuned.memory
    # bf16 gradients (2 bytes) and AdamW's two fp32 moments with an fp32 master copy (12 bytes), adapters only.
    assert memory.gradients_bytes == 2 * layers * per_layer
    assert memory.optimizer_bytes == 12 * layers * per_layer
    # The frozen base in bf16 beside the adapters: every weight of the model (2 x (q, k, v, o, gate, up, down and
    # two norms) + embedding + final norm + head).
    base = layers * (HIDDEN * (2 * Q + 2 * KV) + 3 * HIDDEN * WIDTH + 2 * HIDDEN) + 2 * VOCAB * HIDDEN + HIDDEN
    assert memory.parameters_bytes == 2 * (base + layers * per_layer)
    assert step(tiny(layers), micro_batch_size=1, seq_len=8).trainable_parameters == base


def test_what_a_frozen_layer_keeps_for_its_backward():
    batch, s = 2, 16
    tokens = batch * s
    tuned = step(tiny(), micro_batch_size=batch, seq_len=s, peft=lora()).memory
    # As test_activation_memory_of_one_layer_with_and_without_full_recomputation counts a trained layer, less what
    # only frozen weights' gradients needed: the gate/up projection's input (T x h) and down_proj's (T x width).
    # Kept: the attention norm's input, the adapted QKV projection's input (its adapters' A reads it), Q, K, V and
    # the log-sum-exp, o_proj's input O (attention's backward reads it), the MLP norm's input, SiLU's input and the
    # gate product's two inputs; and each B's input, A's output: T x 3r beside q, k, v and T x r beside o.
    layer = 2 * tokens * (HIDDEN + HIDDEN + (HEADS + 2 * KV_HEADS) * HEAD_DIM + HEADS * HEAD_DIM + HIDDEN
                          + WIDTH + 2 * WIDTH + 3 * RANK + RANK) + batch * HEADS * s * 4
    assert tuned.activations_per_layer_bytes == layer
    # Adapting the MLP too keeps its inputs again (A reads them) and B's: T x 2r beside gate/up, T x r beside down.
    everything = step(tiny(), micro_batch_size=batch, seq_len=s, peft=lora(("all-linear",))).memory
    assert everything.activations_per_layer_bytes == layer + 2 * tokens * (HIDDEN + WIDTH + 2 * RANK + RANK)


def test_qlora_stores_the_linear_weights_in_nf4_and_dequantises_them_for_each_pass():
    layers = 2
    linear = HIDDEN * (2 * Q + 2 * KV) + 3 * HIDDEN * WIDTH  # per layer: q, k, v, o, gate, up, down
    kept = 2 * HIDDEN + 2 * VOCAB * HIDDEN + HIDDEN  # per layer two norms; the embedding, head and final norm once
    tuned = step(tiny(layers), micro_batch_size=1, seq_len=8, peft=lora(method="qlora"))
    adapters = tuned.trainable_parameters
    # NF4 with double quantisation: 4 + 8/64 + 32/(64 x 256) bits = 0.51587 bytes a weight (Dettmers et al. 2023).
    assert NF4_BYTES_PER_PARAMETER == pytest.approx(0.515869, abs=1e-6)
    expected = layers * linear * NF4_BYTES_PER_PARAMETER + 2 * (layers * 2 * HIDDEN + kept - 2 * HIDDEN) + 2 * adapters
    assert tuned.memory.parameters_bytes == pytest.approx(expected, rel=1e-12)
    # Each linear weight is read in nf4 and written in bf16 before its forward matmul, and again before its dX.
    dequantised = [p for p in tuned.rows if p.result.name.endswith(".dequantize")]
    again = [p for p in tuned.rows if p.result.name.endswith(".dequantize.backward")]
    assert sum(p.result.bytes * p.result.instances for p in dequantised) == pytest.approx(
        layers * linear * (NF4_BYTES_PER_PARAMETER + 2), rel=1e-12)
    assert sum(p.result.bytes * p.result.instances for p in again) == pytest.approx(
        layers * linear * (NF4_BYTES_PER_PARAMETER + 2), rel=1e-12)
    fp8_base = step(tiny(layers), micro_batch_size=1, seq_len=8, peft=lora(method="qlora", base_dtype="fp8"))
    assert fp8_base.memory.parameters_bytes == pytest.approx(
        expected + layers * linear * (1 - NF4_BYTES_PER_PARAMETER), rel=1e-12)


def test_adapter_sync_is_of_the_adapters_gradients_only():
    tuned = step(tiny(2), micro_batch_size=1, seq_len=8, parallelism=Parallelism(data=4), peft=lora())
    (sync,) = [c for c in tuned.communication if c.group == "data"]
    assert sync.name == "adapter gradient all-reduce"
    assert sync.buffer_bytes == 2 * tuned.trainable_parameters  # bf16 gradients
    # FSDP over the frozen base: the adapters' gradients reduce-scattered, the base and the adapters gathered.
    sharded = step(tiny(2), micro_batch_size=1, seq_len=8, parallelism=Parallelism(data=4, zero_stage=3),
                   peft=lora())
    scatter, gather = [c for c in sharded.communication if c.group == "data"]
    assert scatter.buffer_bytes == 2 * sharded.trainable_parameters
    assert gather.name.startswith("adapter and frozen-base parameter all-gathers")
    assert gather.buffer_bytes == sharded.memory.parameters_per_device * 2


def test_tensor_parallel_adapters_follow_their_base_split():
    batch, s, t = 1, 8, 2
    tokens = batch * s
    tuned = step(tiny(), micro_batch_size=batch, seq_len=s, parallelism=Parallelism(tensor=t), peft=lora())
    forward = {p.result.name: p.result.flops for p in tuned.rows if p.phase == "forward"}
    # Beside column-parallel q, k, v: A whole (3 r x h), B split (each module's outputs over t).
    assert forward["qkv_proj.lora_A"] == 2 * tokens * 3 * RANK * HIDDEN
    assert forward["qkv_proj.lora_B"] == 2 * tokens * RANK * (Q + 2 * KV) / t
    # Beside row-parallel o: A split (its inputs over t), B whole, the partial sums riding o_proj's all-reduce.
    assert forward["o_proj.lora_A"] == 2 * tokens * RANK * Q / t
    assert forward["o_proj.lora_B"] == 2 * tokens * RANK * HIDDEN


@pytest.mark.parametrize("peft, field, reason", [
    (Peft(target_modules=("wq",)), "peft.target_modules", "'wq' names no linear module"),
    (Peft(target_modules=("lm_head",)), "peft.target_modules", "names no linear module"),
    (Peft(method="dora"), "peft.method", "one of lora, qlora"),
    (Peft(base_dtype="nf4"), "peft.base_dtype", "only qlora"),
    (Peft(method="qlora", base_dtype="int3"), "peft.base_dtype", "one of nf4, fp8"),
])
def test_what_cannot_be_fine_tuned_is_refused_naming_the_field(peft, field, reason):
    with pytest.raises(CostModelError) as refused:
        step(tiny(), micro_batch_size=1, seq_len=8, peft=peft)
    assert refused.value.field == field and reason in refused.value.reason


def test_qlora_with_an_fp8_recipe_and_lora_with_expert_parallelism_are_refused():
    with pytest.raises(CostModelError, match="fp8 recipe needs a LoRA base"):
        step(tiny(), micro_batch_size=1, seq_len=8, peft=lora(method="qlora"), dtypes=TrainingDTypes(fp8_recipe="delayed"))
    moe = catalog_arch("mixtral-8x7b")
    with pytest.raises(CostModelError, match="expert parallelism is not modelled"):
        step(moe, micro_batch_size=1, seq_len=8, parallelism=Parallelism(data=8, expert=8), peft=lora())


# MLPerf Training v5.0's llama2_70b_lora steps (service/core/expectations/training_checks.py has the sources): 8
# sequences of 8,192 tokens a step, gradient accumulation 1, LoRA rank 16 and alpha 32. The layout of the submitters'
# recipes (AMD's config_MI300X_1x8x1.sh, NVIDIA's config_DGXB200_1x8x1xtp1pp1cp1.sh): TP 1, PP 1, CP 1, micro-batch
# 1, so 8 data-parallel replicas; fp8 matmuls with per-tensor scales from the amax history (Transformer Engine's
# delayed scaling); NeMo's adapters on the fused QKV and the output projection.
MEASURED = {check.device_id: check for check in TRAINING_CHECKS if check.run == MLPERF_LORA}


def mlperf_lora_step(device_id, evaluator=None, **changes):
    device = nominal_device(device_id)
    setup = dict(micro_batch_size=1, seq_len=8192, parallelism=Parallelism(data=8),
                 dtypes=TrainingDTypes(fp8_recipe="delayed"), peft=Peft("lora", 16, 32, ATTENTION)) | changes
    return analyze_training(catalog_arch("llama-2-70b"), evaluator or Evaluator(device), topology(device),
                            TrainingSetup(**setup))


def test_the_measured_steps_are_the_logs():
    # AMD: 48 steps between the block_stop events at 1,920 and 2,304 samples; NVIDIA: the log's train_step_time,
    # which its throughput line (5.19 samples/s, 8 a step) agrees with.
    assert {d: round(c.measured_step_s, 3) for d, c in MEASURED.items()} == {
        "nvidia-b200": 1.541, "amd-mi300x": 3.946, "amd-mi325x": 2.931}
    assert 8 / 5.191874942009905 == pytest.approx(MEASURED["nvidia-b200"].measured_step_s, rel=1e-3)


@pytest.mark.parametrize("device_id", sorted(MEASURED))
def test_the_bound_never_exceeds_mlperfs_measured_lora_steps(device_id):
    measured = MEASURED[device_id].measured_step_s
    bound = mlperf_lora_step(device_id)
    assert bound.step_time_s <= measured
    # The same step in bf16 (no fp8 recipe) is still below: the bound never relies on the fp8 peak to hold.
    assert mlperf_lora_step(device_id, dtypes=TrainingDTypes()).step_time_s <= measured
    # Full fine-tuning of the same model, the only thing the service could describe before, is 1.5x slower or more.
    full = mlperf_lora_step(device_id, peft=None, dtypes=TrainingDTypes())
    assert full.step_time_s > bound.step_time_s * 1.5


@pytest.mark.parametrize("device_id", sorted(MEASURED))
def test_the_expected_steps_the_answers_state_are_the_services(device_id):
    device = nominal_device(device_id)
    tables = shipped_kernel_tables(device_id)
    expected = mlperf_lora_step(device_id, KernelEvaluator(device, tables=tables)).step_time_s
    assert expected == pytest.approx(MEASURED[device_id].expected_step_s, rel=2e-3)
    assert expected > mlperf_lora_step(device_id).step_time_s  # never below the bound


def test_the_expected_steps_order_the_systems_as_measured_and_where_they_miss():
    errors = {d: c.error for d, c in MEASURED.items()}
    # Within 25 % on the devices whose own tables compose the step: B200 17 % short of the measured step, MI300X 3 %
    # over it (AMD's partial recomputation, not composed, would add to it).
    assert errors["nvidia-b200"] == pytest.approx(-0.165, abs=0.01)
    assert errors["amd-mi300x"] == pytest.approx(0.032, abs=0.01)
    # The MI325X has no tables of its own: the MI300X's at its roofs (the same peaks, 13 % more HBM bandwidth) expect
    # it 2 % faster than the MI300X; it measured 1.35x faster, which neither its peaks nor its bandwidth explain (it
    # is allowed 1,000 W against the MI300X's 750 W). 36 % over: beyond the target, said in every answer using it.
    assert errors["amd-mi325x"] == pytest.approx(0.363, abs=0.01)
    by_measured = sorted(MEASURED, key=lambda d: MEASURED[d].measured_step_s)
    assert by_measured == sorted(MEASURED, key=lambda d: MEASURED[d].expected_step_s) == [
        "nvidia-b200", "amd-mi325x", "amd-mi300x"]
