"""Parameter-efficient fine-tuning in a training step: LoRA (Hu et al. 2021) and QLoRA (Dettmers et al. 2023), as
Hugging Face PEFT runs them.

A LoRA adapter beside a frozen linear module W [n, k] adds (alpha / r) B A x to its output, A [r, k] and B [n, r]
trained, W frozen. What changes in the step (docs/training.md counts it):
- forward: after each adapted matmul, A over its input (modules fused into one row, such as q, k and v, read the
  input once), B over A's output, and the scaled output added to the base's;
- backward: a frozen matmul computes its input gradient only (dX = dY W^T), no weight gradient; the adapters both;
  the embedding, frozen and first, has no backward at all;
- kept for the backward: a frozen matmul keeps nothing of its input (PyTorch saves a product's input only for the
  weight gradient it is not asked for), unless its adapter reads that input or attention keeps it anyway (its
  output O, which o_proj reads); B keeps A's output;
- gradients, optimizer states, their sync and the update: the adapters' only;
- QLoRA stores the frozen base's linear weights in 4-bit NF4 (or fp8) and dequantises each to the parameters' type
  before its matmul, in the forward and again for the backward's dX (bitsandbytes' MatMul4Bit); embedding, LM head
  and norms stay in 16 bits.

Tensor parallelism shards an adapter with its base: beside a column-parallel W (its outputs split) A is whole and
B split; beside a row-parallel one (inputs split) A is split and B whole, its partial products summed by the base's
own all-reduce. The adapters' tiny [tokens, r] reductions are not counted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.operators.base import OperatorCost
from service.core.operators.pointwise import elementwise_cost
from service.core.transformer.architecture import Architecture, LayerGroup
from service.core.transformer.layers import ModelDTypes, Row, cost_of, kv_heads_on_device, linear_cost

METHODS = ("lora", "qlora")
ALL_LINEAR = "all-linear"  # PEFT's shorthand: every linear module but the output layer
DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")  # MLPerf Training's llama2_70b_lora reference adapts these
# NF4 with double quantisation: 4 bits a weight, an 8-bit absmax per 64 weights and an fp32 second-level scale per 256
# absmax values (Dettmers et al. 2023, section 3: 4 + 8/64 + 32/(64 x 256) = 4.127 bits).
NF4_BYTES_PER_PARAMETER = (4 + 8 / 64 + 32 / (64 * 256)) / 8
QUANTISED_BASE_BYTES = {"nf4": NF4_BYTES_PER_PARAMETER, "fp8": 1.0}
# Rows that fuse several of Hugging Face's modules (one matmul over their stacked weights), and the modules' names.
FUSED_MODULES = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj"),
                 "kv_a_proj": ("kv_a_proj_with_mqa",)}
# Linear rows PEFT leaves alone here: the output layer (as its all-linear does) and the MoE routers.
NOT_ADAPTABLE = frozenset({"lm_head", "router"})
# Matmuls whose input attention's backward keeps anyway (its output O): kept whether they are adapted or not.
READS_ATTENTION_OUTPUT = frozenset({"o_proj"})
ADAPTER, DEQUANTIZE = ".lora_", ".dequantize"
FROZEN_MATMULS = ("matmul", "grouped_matmul")
MAX_TARGETS = 64


@dataclass(frozen=True)
class Peft:
    method: str = "lora"
    rank: int = 16
    alpha: float = 32.0
    target_modules: tuple[str, ...] = DEFAULT_TARGETS
    base_dtype: str | None = None  # qlora: "nf4" (default) or "fp8"; lora: the parameters' type

    @property
    def quantised_base(self) -> bool:
        return self.method == "qlora"

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    @property
    def stored_base(self) -> str | None:
        """The frozen base's storage type where QLoRA quantises it."""
        return (self.base_dtype or "nf4") if self.quantised_base else None

    def base_bytes_per_parameter(self, parameters: str) -> float:
        """Bytes a frozen linear weight is stored in."""
        stored = self.stored_base
        return QUANTISED_BASE_BYTES[stored] if stored else bytes_per_element(parameters)

    def check(self) -> None:
        if self.method not in METHODS:
            raise CostModelError("peft.method", f"one of {', '.join(METHODS)}")
        if self.base_dtype is not None and self.base_dtype not in QUANTISED_BASE_BYTES:
            raise CostModelError("peft.base_dtype", f"one of {', '.join(QUANTISED_BASE_BYTES)}")
        if self.base_dtype is not None and not self.quantised_base:
            raise CostModelError("peft.base_dtype", "only qlora stores the frozen base in another type; a LoRA "
                                                    "base is kept in dtypes.parameters")
        if not self.target_modules or len(self.target_modules) > MAX_TARGETS:
            raise CostModelError("peft.target_modules", f"1 to {MAX_TARGETS} module names")


def is_adapter(row: Row) -> bool:
    return ADAPTER in row.name


def is_dequantize(row: Row) -> bool:
    return row.name.endswith(DEQUANTIZE)


def is_frozen_matmul(row: Row) -> bool:
    return row.kind in FROZEN_MATMULS and not is_adapter(row)


def row_modules(name: str) -> tuple[str, ...]:
    """Hugging Face's names of the modules a row computes (a shared expert's projections answer to the same names,
    as PEFT matches a module by the end of its path)."""
    name = name.removeprefix("shared_")
    return FUSED_MODULES.get(name, (name,))


def _adaptable(row: Row) -> bool:
    return row.kind == "matmul" and row.params > 0 and row.name not in NOT_ADAPTABLE


def adapted_modules(row: Row, targets: tuple[str, ...]) -> tuple[str, ...]:
    if not _adaptable(row):
        return ()
    modules = row_modules(row.name)
    return modules if ALL_LINEAR in targets else tuple(m for m in modules if m in targets)


def adaptable_modules(rows: list[Row]) -> set[str]:
    return {m for row in rows if _adaptable(row) for m in row_modules(row.name)}


def check_targets(peft: Peft, layers: list[list[Row]]) -> None:
    """Every target names a linear module of the model, or the request is refused naming those it has."""
    if ALL_LINEAR in peft.target_modules:
        return
    known = set().union(*(adaptable_modules(rows) for rows in layers))
    unknown = [t for t in peft.target_modules if t not in known]
    if unknown:
        raise CostModelError("peft.target_modules", f"{unknown[0]!r} names no linear module of this model's layers "
                                                    f"(routed experts, routers and the LM head are not adapted); "
                                                    f"it has: {', '.join(sorted(known))}")


def _shape(row: Row, tokens: int, activations: str) -> tuple[int, int]:
    """(n, k) of a linear row on its device: n from the output it writes, k from its FLOPs (a bias adds n per token,
    less than one more k)."""
    cost = cost_of(row)
    n = round(cost.bytes_written / (tokens * bytes_per_element(activations)))
    k = int(cost.flops // (2 * tokens * n))
    if row.params not in (n * k, n * k + n):
        raise CostModelError("peft.target_modules", f"{row.name}'s shape on the device could not be read to adapt it")
    return n, k


def _module_widths(row: Row, n: int, arch: Architecture, group: LayerGroup, tensor: int) -> dict[str, int]:
    """Each fused module's share of a row's n outputs on the device."""
    modules = row_modules(row.name)
    if len(modules) == 1:
        return {modules[0]: n}
    if row.name == "qkv_proj":
        kv = kv_heads_on_device(arch.kv_heads_of(group), tensor)
        d = arch.head_dim_of(group)
        q = (2 if arch.attention_output_gate else 1) * (arch.heads // tensor) * d
        widths = {"q_proj": q, "k_proj": kv * d}
        if arch.projected_value_dim(group):  # Gemma 4's global layers have no v_proj
            widths["v_proj"] = kv * arch.projected_value_dim(group)
    else:
        widths = dict.fromkeys(modules, n // len(modules))
    if sum(widths.values()) != n:
        raise CostModelError("peft.target_modules", f"{row.name}'s modules could not be told apart to adapt them")
    return widths


def _summed(costs: list[OperatorCost], note: str) -> OperatorCost:
    first = costs[0]
    return OperatorCost(first.kind, sum(c.flops for c in costs), sum(c.bytes_read for c in costs),
                        sum(c.bytes_written for c in costs), first.compute_dtype, first.unit, (note,),
                        weight_bytes_read=sum(c.weight_bytes_read for c in costs))


def adapter_rows(row: Row, modules: tuple[str, ...], widths: dict[str, int], k: int, tokens: int, rank: int,
                 dtypes: ModelDTypes) -> list[Row]:
    """A (the modules' stacked [r, k] matrices over the row's input, read once), B (each module's [n_i, r] over its
    r-wide slice of A's output) and the scaled sum into the base's output."""
    m, adapted = len(modules), sum(widths[name] for name in modules)
    a = linear_cost(tokens, m * rank, k, dtypes)
    b = _summed([linear_cost(tokens, widths[name], rank, dtypes) for name in modules],
                f"LoRA B of {', '.join(modules)}: [tokens, r] x [r, n] each")
    add = elementwise_cost(op="lora_scaled_add", shape=[tokens, adapted], dtype=dtypes.activations, arity=2,
                           flops_per_element=2)
    return [Row(f"{row.name}{ADAPTER}A", "matmul", row.count, a, params=m * rank * k),
            Row(f"{row.name}{ADAPTER}B", "matmul", row.count, b, params=rank * adapted),
            Row(f"{row.name}{ADAPTER}residual", "elementwise", row.count, add)]


def dequantize_row(row: Row, peft: Peft, parameters: str) -> Row:
    """QLoRA's dequantisation of a frozen weight before its matmul: reads it in its stored type, writes it in the
    parameters' (one scale multiply a weight)."""
    weights, stored = row.params, peft.stored_base
    cost = OperatorCost("elementwise", float(weights), weights * peft.base_bytes_per_parameter(parameters),
                        weights * bytes_per_element(parameters), parameters, Unit.vector,
                        (f"QLoRA: the frozen {stored} weight dequantised to {parameters} before the matmul",))
    return Row(f"{row.name}{DEQUANTIZE}", "elementwise", row.count, cost)


def peft_layer_rows(rows: list[Row], peft: Peft, arch: Architecture, group: LayerGroup, tokens: int, tensor: int,
                    dtypes: ModelDTypes) -> list[Row]:
    """A layer's forward on one device with the adapters beside their modules and, under QLoRA, each frozen
    weight's dequantisation before its matmul."""
    out: list[Row] = []
    for row in rows:
        if peft.quantised_base and row.kind in FROZEN_MATMULS and row.params:
            out.append(dequantize_row(row, peft, dtypes.weights))
        out.append(row)
        modules = adapted_modules(row, peft.target_modules)
        if modules:
            n, k = _shape(row, tokens, dtypes.activations)
            widths = _module_widths(row, n, arch, group, tensor)
            present = tuple(m for m in modules if m in widths)
            if present:
                out += adapter_rows(row, present, widths, k, tokens, peft.rank, dtypes)
    return out


def adapted_bases(rows: list[Row]) -> frozenset[str]:
    """The rows of a layer that have an adapter beside them."""
    return frozenset(row.name.partition(ADAPTER)[0] for row in rows if is_adapter(row))


def saved_bytes(row: Row, kept_by_default: float, adapted: frozenset[str]) -> float:
    """What a row keeps for the backward under PEFT, given what it keeps when every weight trains and which of its
    layer's rows are adapted."""
    base, _, part = row.name.partition(ADAPTER)
    if part == "A" or is_dequantize(row):  # A's input is its base's, kept there
        return 0.0
    if not part and is_frozen_matmul(row) and base not in READS_ATTENTION_OUTPUT and base not in adapted:
        return 0.0
    return kept_by_default


def adapter_params(rows: list[Row]) -> int:
    return sum(row.params * row.count for row in rows if is_adapter(row))


def quantised_params(rows: list[Row]) -> int:
    return sum(row.params * row.count for row in rows if is_frozen_matmul(row))


def adapted_module_names(row_names: Iterable[str], targets: tuple[str, ...]) -> list[str]:
    """The modules holding adapters in a step, read from its rows (each adapter's A row names its base row)."""
    first = f"{ADAPTER}A"
    bases = {name.removesuffix(first) for name in row_names if name.endswith(first)}
    return sorted({m for base in bases for m in row_modules(base) if ALL_LINEAR in targets or m in targets})
