"""FP8 training as Transformer Engine's recipes run it: the layers' matmuls in fp8, everything else in the 16-bit
activations' type, and the casting work each recipe adds.

- A matmul's input is cast to fp8 before it (a `.quantize` row): read in 16 bits, written twice in fp8, as rows
  and as columns (Hopper's fp8 tensor cores take only one layout, so the weight gradient needs the transposed
  copy; MXFP8 scales rows and columns apart), each with its recipe's scales. `current` scaling reads the tensor
  once more for its amax first; `delayed` uses the amax history and finds the new amax in the same pass.
- The matmul reads its fp8 input and the fp8 copy of its weights, computes at the fp8 peak and writes its output
  in 16 bits. The weights are cast to fp8 once a step (the copy is kept over the micro-batches), after the
  optimizer's update of the master weights.
- In the backward the output gradient is cast the same way (a `.grad_quantize` row); dX = dY W^T reads both in
  fp8 and writes dX in 16 bits; dW = X^T dY reads the fp8 copies and writes the gradient in its own type.
- Kept for the backward: the fp8 input (one copy; the transposed one is rewritten from it, a cost not counted).
- Attention, norms, softmax, residuals, the embedding and the LM head stay in 16 bits; so do the master weights,
  the optimizer, the gradients (their own dtype) and every collective.
"""

from __future__ import annotations

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.operators.base import OperatorCost
from service.core.transformer.layers import Row, cost_of

RECIPES = ("none", "delayed", "current", "blockwise", "mxfp8")
# Scale bytes per fp8 element: one fp32 scale per tensor (delayed, current), per 128 elements (DeepSeek-V3's
# 1 x 128 blocks), one e8m0 byte per 32 (MXFP8).
SCALE_BYTES_PER_ELEMENT = {"delayed": 0.0, "current": 0.0, "blockwise": 4 / 128, "mxfp8": 1 / 32}
CAST_FLOPS_PER_ELEMENT = 3  # |x|, the running max, the scaling multiply
COPIES = 2  # row-wise and column-wise (transposed) fp8 copies
FP8_MATMULS = ("matmul", "grouped_matmul")
QUANTIZE, GRAD_QUANTIZE = ".quantize", ".grad_quantize"


def check_recipe(recipe: str, activations: str) -> None:
    if recipe not in RECIPES:
        raise CostModelError("dtypes.fp8_recipe", f"one of {', '.join(RECIPES)}")
    if recipe != "none" and bytes_per_element(activations) != 2:
        raise CostModelError("dtypes.fp8_recipe", "an fp8 recipe casts 16-bit activations: dtypes.activations must "
                                                  "be bf16 or fp16")


def cast_cost(elements: float, recipe: str, note: str) -> OperatorCost:
    """Casting `elements` 16-bit values to the recipe's two fp8 copies with their scales."""
    passes = 2 if recipe == "current" else 1
    written = elements * COPIES * (1 + SCALE_BYTES_PER_ELEMENT[recipe])
    return OperatorCost("elementwise", CAST_FLOPS_PER_ELEMENT * elements, passes * 2 * elements, written, "fp32",
                        Unit.vector, (f"fp8 cast ({recipe} scaling): {note}; read in 16 bits"
                                      + (" twice (amax first)" if passes == 2 else "")
                                      + f", written as {COPIES} fp8 copies with their scales",))


def is_fp8(row: Row) -> bool:
    return row.kind in FP8_MATMULS and not row.is_comm and cost_of(row).compute_dtype == "fp8"


def fp8_rows(rows: list[Row], recipe: str, weight_element_bytes: float) -> list[Row]:
    """A layer's forward rows with its matmuls in fp8, each after the cast of its input. weight_element_bytes:
    of the weights the rows were built with."""
    if recipe == "none":
        return rows
    out: list[Row] = []
    for row in rows:
        if row.kind not in FP8_MATMULS or row.is_comm:
            out.append(row)
            continue
        cost = cost_of(row)
        inputs = (cost.bytes_read - cost.weight_bytes_read) / 2  # 16-bit activations: elements
        weights = cost.weight_bytes_read / weight_element_bytes
        out.append(Row(row.name + QUANTIZE, "elementwise", row.count, cast_cost(inputs, recipe, f"{row.name}'s input")))
        out.append(row._replace(cost=OperatorCost(
            cost.kind, cost.flops, inputs + weights, cost.bytes_written, "fp8", Unit.tensor,
            cost.assumptions + (f"fp8 ({recipe}): reads its fp8 input and fp8 weights, writes 16 bits",),
            weight_bytes_read=weights)))
    return out


def fp8_backward(row: Row, recipe: str, gradient_bytes: float, accumulate: bool) -> tuple[Row, Row, Row]:
    """(the output gradient's cast, dX = dY W^T, dW = X^T dY) of an fp8 matmul row (its bytes are fp8 elements).
    gradient_bytes: of one weight gradient element."""
    cost = cost_of(row)
    inputs, weights, outputs = cost.bytes_read - cost.weight_bytes_read, cost.weight_bytes_read, cost.bytes_written / 2
    grads = weights * gradient_bytes
    cast = Row(row.name + GRAD_QUANTIZE, "elementwise", row.count, cast_cost(outputs, recipe, f"{row.name}'s dY"))
    dgrad = OperatorCost(cost.kind, cost.flops, outputs + weights, inputs * 2, "fp8", Unit.tensor,
                         ("dX = dY W^T in fp8: reads fp8 dY and W, writes dX in 16 bits",), weight_bytes_read=weights)
    wgrad = OperatorCost(cost.kind, cost.flops, outputs + inputs + (grads if accumulate else 0.0), grads, "fp8",
                         Unit.tensor, ("dW = X^T dY in fp8: reads the fp8 copies, writes dW in the gradients' type"
                                       + (" (accumulated: read too)" if accumulate else ""),))
    return cast, Row(f"{row.name}.dgrad", row.kind, row.count, dgrad), Row(f"{row.name}.wgrad", row.kind, row.count,
                                                                            wgrad)


def weight_cast(parameters: float, recipe: str) -> Row:
    """Once a step, after the update: the 16-bit weights cast to their fp8 copies."""
    return Row("fp8_weight_cast", "elementwise", 1, cast_cost(parameters, recipe, "the updated weights, once a step"))
