"""A step as the device's kernels run it: each row at the roofs the device's measured kernel tables reach.

The bound places each row at its roof. A kernel table says how far below the roofs the device's kernels run
(service/core/expectations/kernels.py). A composed step reads, row by row, the kernels' own roofs (the efficiencies
the largest clearly compute- and memory-bound timings reach: KernelCalibration.kernel_*_efficiency, else the fit's):
- a matmul: those of its compute dtype's table, else the device's floor;
- a grouped (MoE) matmul: those of its dtype's fused-MoE table as the serving engine runs it (its own, else
  TensorRT-LLM's: service/data/calibrations/moe.json), else the matmul's; where the deployment's experts are stored
  narrower than the activations they multiply (gpt-oss's MXFP4 experts in bf16 under vLLM on Hopper, through Marlin),
  the table of those weight-only kernels where the engine has one (weight_only_experts): on an H200 they read the
  experts at 0.53 of the datasheet against 0.82 for the bf16 kernels, no faster than on an H100; MoE kernels read the experts' weights at
  0.5-0.93 of the datasheet's bandwidth and multiply at 0.06-0.86 of the peak (SGLang's fp8 at 0.23, TensorRT-LLM's at
  0.59, B200), where the same device's GEMMs run at their own roofs;
- an attention row: its kind's (latent or grouped-query, decode or prefill) fit as the serving engine runs it (its
  own, else TensorRT-LLM's: service/data/calibrations/attention.json), by its cache dtype (a decode or verification
  step's) or its activations' (a prompt's), at the floor's roof where the table times no shape bound by it; SGLang's
  latent attention over an fp8 cache reads it at 0.06-0.08 of the datasheet on Hopper (0.89-0.91 over a bf16 one),
  0.79-0.83 on Blackwell, and its latent prompts run at a third of TensorRT-LLM's speed on an H200;
- every other row (norms, activations, the embedding, an attention without a fit): the device's floor, its bf16
  table's (else the table with the most timings), the nearest thing to a measured bandwidth a GEMM table gives;
- a collective: its bound (latency + bytes over the link): no collective table is read yet.
The fit's t0 (the fixed cost of one kernel timed alone) is left to the engine's line (engines.py): engines fuse
small kernels and replay a step as a CUDA or HIP graph, and with a t0 a row the composed step exceeded measured
TPOTs at small batches (13.9 ms against 8.4 ms measured, DeepSeek-R1 NVFP4 on 4 B200s under TensorRT-LLM at 4 in
flight) and carried worse to the devices left out (docs/serving.md). A row's composed time is never below its
bound (both efficiencies are at most 1). Both terms stay affine in the batch, so a composed step's curve over
batches is exact as the bound's is; a routed row's weight bytes are reported over e_m, so the experts-hit curve
reads them at the speed they are read.
"""


from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from service.core.dtypes import bytes_per_element, peak_dtype
from service.core.expectations.attention_kernels import attention_key
from service.core.expectations.kernels import COMPUTE, MEMORY, KernelCalibration, weight_only_key
from service.core.memo import read_only
from service.core.transformer.analysis import Evaluator
from service.core.transformer.layers import ModelDTypes, Row

MATMUL_KINDS = frozenset({"matmul", "grouped_matmul"})


def weight_only_experts(dtypes: ModelDTypes) -> str | None:
    """The fused-MoE table key of a deployment whose routed experts are stored narrower than the activations they
    multiply (KernelCalibration.key), else None: its experts run as their compute dtype's kernels."""
    stored, computed = peak_dtype(dtypes.experts or dtypes.weights), peak_dtype(dtypes.activations)
    return weight_only_key(stored, computed) if bytes_per_element(stored) < bytes_per_element(computed) else None


@dataclass(frozen=True)
class KernelTables:
    """A device's kernel fits by dtype, the one its other rows run at, and, where the fits are another device's
    (the nearest measured part of its vendor), which device's and why."""

    device_id: str
    fits: Mapping[str, KernelCalibration]  # by peak dtype (bf16, fp8, fp4)
    stand_in_for: str | None = None  # the device whose tables these are, where not this one's
    stand_in_reason: str | None = None
    moe_fits: Mapping[str, KernelCalibration] = field(default_factory=dict)  # fused-MoE kernels, by peak dtype
    # Attention kernels, by attention_key ("mla_decode:fp8", "attention_prefill:bf16", ...).
    attention_fits: Mapping[str, KernelCalibration] = field(default_factory=dict)

    def __post_init__(self):  # read-only: the tables key a memo by identity (kernel_tables.kernel_evaluator)
        for name in ("fits", "moe_fits", "attention_fits"):
            object.__setattr__(self, name, read_only(getattr(self, name)))

    @property
    def floor(self) -> KernelCalibration:
        if "bf16" in self.fits:
            return self.fits["bf16"]
        return max(self.fits.values(), key=lambda fit: (fit.fitted_on, fit.dtype))

    def for_row(self, kind: str, compute_dtype: str | None, attention_params: dict | None = None) -> KernelCalibration:
        """`attention_params`: an attention row's (Row.attention_params), which tell its attention fit."""
        if kind in MATMUL_KINDS and compute_dtype is not None:
            dtype = peak_dtype(compute_dtype)
            moe = self.moe_fits.get(dtype) if kind == "grouped_matmul" else None
            return moe or self.fits.get(dtype) or self.floor
        if kind == "attention" and self.attention_fits:
            key = attention_key(attention_params)
            if key is not None and key in self.attention_fits:
                return self.attention_fits[key]
        return self.floor

    def efficiencies(self, kind: str, compute_dtype: str | None,
                     attention_params: dict | None = None) -> tuple[float, float]:
        """(compute, memory) roofs a row runs at: its fit's (for_row), but a term that fit's timings could not tell
        (none of them bound by it: the decode-attention tables time no clearly compute-bound shape, the prefill ones
        no memory-bound one) at the floor's."""
        fit = self.for_row(kind, compute_dtype, attention_params)
        floor = self.floor
        return (floor.kernel_compute_efficiency if COMPUTE in fit.unidentified else fit.kernel_compute_efficiency,
                floor.kernel_memory_efficiency if MEMORY in fit.unidentified else fit.kernel_memory_efficiency)

    @property
    def ids(self) -> list[str]:
        """Every fit its rows may read: the GEMM fits, and the engine's fused-MoE and attention ones."""
        return sorted(fit.id for fits in (self.fits, self.moe_fits, self.attention_fits) for fit in fits.values())

    def describe(self) -> str:
        own = (f"{self.stand_in_for}'s tables at {self.device_id}'s roofs ({self.stand_in_reason})"
               if self.stand_in_for else f"{self.device_id}'s tables")
        fits = "; ".join(f"{fit.dtype}: {fit.fitted_on:,} {fit.engine} GEMMs, compute at "
                         f"{fit.kernel_compute_efficiency:.3g} of the peak, HBM at {fit.kernel_memory_efficiency:.3g} "
                         "of the datasheet, the formula off by "
                         f"{fit.median_error:.1%} (median) on {fit.checked_on:,} held out"
                         for fit in sorted(self.fits.values(), key=lambda f: f.dtype))
        moe = "; ".join(f"{fit.key}: {fit.fitted_on:,} {fit.engine} {fit.timings_name} timings, compute at "
                        f"{fit.kernel_compute_efficiency:.3g} of the peak, HBM at {fit.kernel_memory_efficiency:.3g}"
                        + (f" (the roofs of the model's own shape, {fit.family}, as timed)" if fit.family else "")
                        for fit in sorted(self.moe_fits.values(), key=lambda f: f.dtype))
        grouped = (f" (grouped ones, the experts', by their dtype's fused-MoE fit where it has one: {moe})"
                   if moe else "")
        kernels = "; ".join(f"{key}: {fit.fitted_on:,} {fit.engine} timings, compute at "
                           f"{fit.kernel_compute_efficiency:.3g} of the peak, HBM at {fit.kernel_memory_efficiency:.3g}"
                           for key, fit in sorted(self.attention_fits.items()))
        attention = (f", attention by its kind's fit where it has one (a decode's by its cache dtype, a prompt's by "
                     f"its activations': {kernels})" if kernels else "")
        return (f"each row at the efficiencies of the kernel fits of {own} ({fits}): matmuls by their dtype's fit"
                f"{grouped}{attention}, every other row at the {self.floor.dtype} fit's, collectives at their bound; "
                "each kernel's fixed cost is left to the engine's line")


def standing_in(tables: KernelTables, device_id: str, peak_of, bandwidth: float, reason: str) -> KernelTables:
    """Another device's fits at this device's nominal roofs: what the same kernels would do on its memory system
    and peaks (`peak_of(dtype)` its tensor peak, `bandwidth` its HBM's)."""
    def moved(fits: Mapping[str, KernelCalibration]) -> dict[str, KernelCalibration]:
        return {key: replace(fit, device_id=device_id, peak_flops_per_s=peak_of(fit.compute_dtype),
                             hbm_bytes_per_s=bandwidth, anchors=None, source=f"{fit.source}, standing in for {device_id}")
                for key, fit in fits.items() if peak_of(fit.compute_dtype)}

    return KernelTables(device_id, moved(tables.fits), tables.device_id, reason, moved(tables.moe_fits),
                        moved(tables.attention_fits))


@dataclass
class KernelEvaluator(Evaluator):
    """An Evaluator whose rows take what the kernel tables expect of them (at the nominal roofs the fits were made
    at: build it without measured roofs)."""

    tables: KernelTables | None = field(default=None)

    def __post_init__(self):
        super().__post_init__()
        self.below_roofs = self.tables is not None

    def efficiencies(self, row: Row, compute_dtype: str) -> tuple[float, float]:
        assert self.tables is not None  # called only where below_roofs, which tables set
        return self.tables.efficiencies(row.kind, compute_dtype, row.attention_params)
