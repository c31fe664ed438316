"""What a quantised checkpoint leaves in 16 bits, as engines load it: the embedding, LM head, routers and norms
always; the module classes its lists name (attention, shared experts, dense MLPs, whole dense layers). Each by
hand."""

import json
from pathlib import Path

import pytest

from service.core.transformer.capacity import module_params, weight_bytes
from service.core.transformer.families import from_hf_config
from service.core.transformer.layers import ModelDTypes, Step, layer_rows, model_level_rows
from service.core.transformer.params import model_params
from service.core.transformer.quantization import checkpoint_dtypes
from service.persistence.catalog import model_catalog

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "aiconfigurator_model_configs"
CATALOG = {entry["id"]: entry["config"] for entry in model_catalog()}


def _published(name: str):
    return from_hf_config(json.loads((CONFIGS / f"{name}.json").read_text()))


def _weight_bytes_read(rows, name):
    return next(row for row in rows if row.name == name).cost.weight_bytes_read


def test_deepseek_v3_fp8_reads_its_head_and_routers_in_bf16():
    # The fp8 checkpoint stores lm_head (129,280 x 7,168) and each layer's gate (256 x 7,168) in bf16; vLLM and
    # SGLang load them so. Read in fp8 they were 0.93 GB and 1.8 MB a layer short at every decode step.
    arch = from_hf_config(CATALOG["deepseek-v3"])
    dtypes = checkpoint_dtypes(arch.quantization)
    assert (dtypes.weights, dtypes.activations, dtypes.unquantised) == ("fp8", "fp8", "bf16")
    step = Step(batch=1, q_len=1, kv_len=1000)
    _, head = model_level_rows(arch, step, dtypes)
    assert _weight_bytes_read(head, "lm_head") == 129_280 * 7_168 * 2
    moe = next(g for g in arch.groups if g.moe)
    assert _weight_bytes_read(layer_rows(arch, moe, step, dtypes), "router") == 256 * 7_168 * 2


def test_deepseek_v3_fp8_weights_by_hand():
    # 671,026,419,200 parameters: the embedding and head (2 x 926,679,040), the norms and the routers in bf16, the
    # rest in fp8 with an fp32 scale per 128 x 128 block (1 + 4 / 16,384 bytes).
    arch = from_hf_config(CATALOG["deepseek-v3"])
    params, classes = model_params(arch), module_params(arch)
    in_16 = 2 * 129_280 * 7_168 + classes["norms"] + params.final_norm + classes["routers"]
    assert classes["routers"] == 58 * (256 * 7_168 + 256)
    fp8 = params.total - in_16
    assert weight_bytes(arch, checkpoint_dtypes(arch.quantization)) == pytest.approx(
        fp8 * (1 + 4 / 16_384) + in_16 * 2, rel=1e-12)


def test_nvfp4_checkpoints_keep_the_attention_their_lists_name():
    # NVIDIA's MiniMax-M2.5 NVFP4 lists every layer's self_attn (and gate, lm_head) in `ignore`: attention in bf16,
    # the experts in fp4 with an fp8 scale per 16 (0.5 + 1/16 bytes).
    arch = _published("nvidia--MiniMax-M2.5-NVFP4")
    dtypes = checkpoint_dtypes(arch.quantization)
    assert dtypes.kept == {"attention"} and "self_attn" not in arch.quantization.source
    assert "left in 16 bits by its lists: attention" in arch.quantization.source
    rows = layer_rows(arch, arch.groups[0], Step(1, 1, 100), dtypes)
    qkv = next(row for row in rows if row.name == "qkv_proj")
    # 48 query and 2 x 8 K/V heads of 128 from 3,072: (48 + 16) x 128 x 3,072 weights in bf16.
    assert qkv.cost.weight_bytes_read == (48 + 16) * 128 * 3_072 * 2
    params, classes = model_params(arch), module_params(arch)
    in_16 = (params.embedding + params.lm_head + classes["attention"] + classes["norms"] + params.final_norm
             + classes["routers"])
    assert weight_bytes(arch, dtypes) == pytest.approx(params.routed_experts * (0.5 + 1 / 16) + in_16 * 2, rel=1e-12)


def test_an_int4_checkpoint_that_quantises_its_routed_experts_only():
    # Kimi K2.5 (compressed-tensors, int4 in groups of 32): its ignore list names lm_head, the attention, the
    # dense MLP and the shared experts, so only the routed experts are int4.
    arch = _published("moonshotai--Kimi-K2.5")
    dtypes = checkpoint_dtypes(arch.quantization)
    assert dtypes.kept == {"attention", "dense_mlp", "shared_experts"}
    params = model_params(arch)
    in_16 = params.total - params.routed_experts
    per_int4 = 0.5 + 2 / 32  # an fp16 scale per group of 32
    assert weight_bytes(arch, dtypes) == pytest.approx(params.routed_experts * per_int4 + in_16 * 2, rel=1e-12)


def test_whole_dense_layers_left_in_16_bits():
    # GLM-5.1 NVFP4's ignore list names model.layers.0*, 1.* and 2.*: its three dense layers (first_k_dense_replace
    # 3) whole, so their MLPs are bf16 too; model.layers.78* is the multi-token-prediction layer, not counted.
    arch = _published("nvidia--GLM-5.1-NVFP4")
    assert arch.quantization.kept_layers == (0, 1, 2, 78)
    assert "dense_mlp" in checkpoint_dtypes(arch.quantization).kept
    assert "3 dense layers left whole" in arch.quantization.source


def test_norm_and_indexer_entries_do_not_keep_their_module():
    # GLM-5's fp8 list names each layer's self_attn.q_a_layernorm and its indexer's small parts, not its
    # projections: the attention stays fp8.
    arch = _published("zai-org--GLM-5-FP8")
    assert arch.quantization.kept == () and checkpoint_dtypes(arch.quantization).weights == "fp8"


def test_a_requests_dtypes_keep_nothing_but_the_usual():
    # Requested W8A8 dtypes: the matmuls in fp8, the embedding, head and routers in bf16 as ever.
    dtypes = ModelDTypes(weights="fp8", activations="fp8")
    assert dtypes.kept == frozenset() and dtypes.head_dtype(tied=False) == "bf16"
    assert dtypes.module("attention") is dtypes


def test_a_modelopt_fp8_record_reads_as_per_tensor_w8a8():
    # nvidia/Llama-3.1-70B-Instruct-FP8's hf_quant_config.json: quant_algo FP8, exclude_modules [lm_head]. As the
    # CLI attaches it: fp8 weights and activations, one scale a tensor; the head in bf16.
    config = json.loads((CONFIGS / "nvidia--Llama-3.1-70B-Instruct-FP8.json").read_text())
    record = json.loads((CONFIGS / "hf_quant_config" / "nvidia--Llama-3.1-70B-Instruct-FP8.json").read_text())
    arch = from_hf_config({**config, "quantization_config": {"quant_method": "modelopt", **record["quantization"]}})
    dtypes = checkpoint_dtypes(arch.quantization)
    assert (dtypes.weights, dtypes.activations, dtypes.weight_group_size, dtypes.head_dtype(False)) == (
        "fp8", "fp8", None, "bf16")
    params, classes = model_params(arch), module_params(arch)
    in_16 = params.embedding + params.lm_head + classes["norms"] + params.final_norm
    assert weight_bytes(arch, dtypes) == params.total - in_16 + 2 * in_16
