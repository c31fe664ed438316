"""NVIDIA AIConfigurator's public measured GEMM tables (PyPI `aiconfigurator-core`, Apache-2.0;
`aiconfigurator_core/systems/data/<system>/gemm/<engine>/<version>/gemm_perf.parquet`: m, n, k, gemm_dtype and the
latency in ms) as the kernel-timings CSV this service takes: a row a GEMM, the operator a plain matmul in the
table's dtype (fp8 operands write a bf16 result, as their kernels do)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

from service.core.expectations.kernels import weight_only_key
from service.core.transformer.layers import ModelDTypes

PACKAGE = "aiconfigurator-core 0.12.0 (PyPI, Apache-2.0)"
# Their system names and the catalog's devices. Not the L40S: 3 % of its timings run faster than its GDDR6 allows
# (up to 3.5x, working sets up to 104 MB), so they were taken with operands left in its 96 MB L2, and a fit to them
# would expect less than the bound.
DEVICES = {"h100_sxm": "nvidia-h100-sxm", "h200_sxm": "nvidia-h200-sxm", "b200_sxm": "nvidia-b200",
           "b300_sxm": "nvidia-b300", "gb200": "nvidia-gb200", "gb300": "nvidia-gb300"}
# Systems added after the first fits were shipped (the A100 SXM 80GB: bf16 GEMM, MoE and attention tables; none of
# its bf16 GEMMs timed faster than its HBM allows). The fitting scripts fit them after every other table, so that the
# held-out splits they draw in turn from one generator leave the earlier fits as they were.
LATER_DEVICES = {"a100_sxm": "nvidia-a100-80gb-sxm"}
# Their name: (the service's, operand bytes an element, its scale's included: NVFP4 has an fp8 scale per 16). Their
# fp8_block (DeepSeek's 128 x 128 scales) is left out: one table a (device, dtype) is shipped, and the per-tensor
# fp8 one covers the most shapes.
DTYPES = {"bfloat16": ("bf16", 2), "fp8": ("fp8", 1), "nvfp4": ("fp4", 0.5 + 1 / 16)}
# Their MoE tables (moe/<engine>/<version>/moe_perf.parquet) by the scheduler family an engine name runs
# (simulation/engines.engine_family), and their moe_dtype: (the service's dtype, the dtypes a deployment in it runs:
# DeepSeek's fp8 blocks carry an fp32 scale per 128 x 128 weights, as the InferenceX fp8 deployments state it, NVFP4
# an fp8 one per 16, as schemas.models.SCHEMES["nvfp4"]). Their int4 tables are left out: their group size is not
# stated.
MOE_ENGINES = {"sglang": "sglang", "trt": "trtllm", "vllm": "vllm"}
MOE_DTYPES = {"fp8_block": ("fp8", ModelDTypes("fp8", "fp8", "fp8", 128 * 128, 4.0)),
              "nvfp4": ("fp4", ModelDTypes("fp4", "fp4", "fp8", 16, 1.0)),
              "bfloat16": ("bf16", ModelDTypes())}
# Added later, and fitted after every table above (as LATER_DEVICES): MXFP4 experts (an 8-bit scale per 32, gpt-oss's
# checkpoint) multiplied in bf16 (Marlin, weight-only) or in fp8 (w4a8_mxfp4_mxfp8, FlashInfer's and TensorRT-LLM's on
# Blackwell), kept by KernelCalibration.key.
LATER_MOE_DTYPES = {
    "w4a16_mxfp4": (weight_only_key("fp4", "bf16"), ModelDTypes("fp4", "bf16", "bf16", 32, 1.0)),
    "w4a8_mxfp4_mxfp8": (weight_only_key("fp4", "fp8"), ModelDTypes("fp4", "fp8", "fp8", 32, 1.0)),
}
COLUMNS = ("kind", "m", "n", "k", "dtype", "c_dtype", "time_s")


def timings_csv(rows: Iterable[tuple[int, int, int, str, float]]) -> str:
    """(m, n, k, their gemm_dtype, latency in ms) rows as the CSV body of POST .../kernel-timings/csv; dtypes this
    service does not take from them are left out."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for m, n, k, theirs, latency_ms in rows:
        if theirs not in DTYPES:
            continue
        dtype = DTYPES[theirs][0]
        writer.writerow(["matmul", int(m), int(n), int(k), dtype, "bf16" if dtype != "bf16" else "",
                         f"{latency_ms * 1e-3:.6g}"])
    return out.getvalue()
