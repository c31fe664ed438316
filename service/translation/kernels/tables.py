"""Which kernel tables a device's composed steps read: its own fits (timings submitted to it, else those shipped,
service/data/calibrations/gemm.json), else those of the nearest measured part of its vendor at its own roofs; and
for a serving engine, its fused-MoE and attention fits on that device (service/data/calibrations/moe.json and
attention.json: the engine's own table, else TensorRT-LLM's, per key), the fused-MoE ones at the roofs of the model's
own MoE shape where the tables time it. Without an engine (training) the experts'
grouped matmuls read the GEMM fits and attention the floor: no training framework's kernel timings are public in what
the service ships."""

from __future__ import annotations

from service.core.expectations.kernel_steps import KernelEvaluator, KernelTables, standing_in
from service.core.hardware import DeviceSpec
from service.core.memo import ByIdentity
from service.core.roofs import MeasuredRoofs
from service.core.simulation.engines import engine_family
from service.persistence.catalog import attention_calibrations, gemm_calibrations, moe_calibrations, nominal_device
from service.translation.kernels.aiconfigurator import MOE_ENGINES

# Devices no public table covers, and the measured part whose kernels they run: (that device, why).
STAND_INS = {
    "amd-mi325x": ("amd-mi300x", "the same CDNA 3 chip (gfx942, 304 CUs) with HBM3E; aiter's tables time no MI325X "
                                 "of their own"),
    "nvidia-h100-pcie": ("nvidia-h100-sxm", "the same GH100 chip with fewer SMs and HBM2e; AIConfigurator's "
                                            "h100_pcie tables are not shipped"),
    "nvidia-a100-40gb-sxm": ("nvidia-a100-80gb-sxm", "the same GA100 chip with 40 GB of HBM2; AIConfigurator times "
                                                     "the 80 GB part"),
    "nvidia-a100-80gb-pcie": ("nvidia-a100-80gb-sxm", "the same GA100 chip and memory at a lower power limit; "
                                                      "AIConfigurator's a100_pcie system holds no tables"),
}


def _own(device_id: str, measured: MeasuredRoofs | None) -> dict:
    """The device's fits by dtype: those shipped, each replaced by the submitted fit of its dtype (of the engine with
    the most timings) where there is one."""
    fits = {dtype: fit for (shipped_device, dtype), fit in gemm_calibrations().items() if shipped_device == device_id}
    submitted: dict = {}
    for (_, dtype), fit in (measured.kernels.items() if measured is not None else ()):
        if dtype not in submitted or fit.fitted_on > submitted[dtype].fitted_on:
            submitted[dtype] = fit
    return fits | submitted


def _own_moe(device_id: str, engine: str | None, experts: str | None, family: str | None) -> dict:
    """The device's fused-MoE fits by the dtype they compute in for the engine: its own table's, else TensorRT-LLM's;
    none without an engine. `experts`: the deployment's weight-only experts (kernel_steps.weight_only_experts), whose
    table, where there is one, stands for its compute dtype's; `family`: the model's (fused_moe.moe_family), whose
    roofs each fit reads where its tables time that shape."""
    own = _engines_own(moe_calibrations(), device_id, engine)
    fits = {fit.dtype: fit for fit in own.values() if fit.weights is None}
    if experts in own:
        fits[own[experts].dtype] = own[experts]
    return {dtype: fit.for_family(family) for dtype, fit in fits.items()}


def _own_attention(device_id: str, engine: str | None) -> dict:
    """The device's attention fits by attention_key (kind and dtype) for the engine, as its fused-MoE fits are
    chosen."""
    return _engines_own(attention_calibrations(), device_id, engine)


def _engines_own(shipped: dict, device_id: str, engine: str | None) -> dict:
    """A device's shipped fits of one engine's tables by their key: the engine's own table's, else TensorRT-LLM's;
    none without an engine (training: no training framework's kernel timings are public in what is shipped)."""
    if engine is None:
        return {}
    tables = ["trtllm"] + ([theirs] if (theirs := MOE_ENGINES.get(engine_family(engine) or "")) else [])
    return {key: fit for table in tables for (device, name, key), fit in shipped.items()
            if device == device_id and name == table}


def _kernel_tables(device: DeviceSpec, measured: MeasuredRoofs | None, engine: str | None = None,
                   experts: str | None = None, family: str | None = None) -> KernelTables | None:
    """The device's kernel tables (with `engine`'s fused-MoE fits, those of weight-only `experts` where it has
    them, at the roofs of the model's MoE `family` where they time it), or None where neither it nor a stand-in has
    any."""
    fits = _own(device.id, measured)
    if fits:
        return KernelTables(device.id, fits, moe_fits=_own_moe(device.id, engine, experts, family),
                            attention_fits=_own_attention(device.id, engine))
    if device.id not in STAND_INS:
        return None
    other_id, reason = STAND_INS[device.id]
    other = _own(other_id, None)
    if not other:
        return None

    def peak_of(dtype: str) -> float | None:
        peak = device.peak(dtype, "tensor")
        return peak.flops_per_s if peak else None

    hbm = device.memory_level("hbm")
    if hbm is None:
        return None
    return standing_in(KernelTables(other_id, other, moe_fits=_own_moe(other_id, engine, experts, family),
                                    attention_fits=_own_attention(other_id, engine)),
                       device.id, peak_of, hbm.bandwidth_bytes_per_s, reason)


# Once per (device, its measured roofs) as the catalog holds them, and one composing evaluator per tables, like the
# bound's (model_analyses._plain_evaluator): a row composed for one request is composed once for every later one.
kernel_tables = ByIdentity(_kernel_tables, objects=2, limit=32)
kernel_evaluator = ByIdentity(lambda device, tables: KernelEvaluator(device, tables=tables), objects=2, limit=32)


def shipped_kernel_tables(device_id: str, engine: str | None = None, experts: str | None = None,
                          family: str | None = None) -> KernelTables | None:
    """The same, for a catalog device as shipped (no submitted timings)."""
    return _kernel_tables(nominal_device(device_id), None, engine, experts, family)
