"""What the service knows of one operator kind, in one place: its descriptor.

Each kind's module (matmul.py, pointwise.py, attention.py, embedding.py) defines its cost model and its
descriptor; registry.py lists them. Everything that varies by kind reads the descriptor: the cost of a
request, the compute unit in /v1/conventions, the shapes a fusion graph implies, how training differentiates
it and what it keeps for the backward, the CLI's choices and help, the OpenAPI examples' summaries and the
charts' colours. docs/developing.md has the recipe for a new kind.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from service.core.dtypes import bytes_per_element
from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.operators.base import OperatorCost

# In a fusion graph: a matrix operator anchors a kernel (at most one per group); a pointwise one fuses into its
# prologue or epilogue; a lone one (a gather) is always a kernel of its own.
FusionRole = Literal["matrix", "pointwise", "alone"]
# Its backward in a training step: a matmul's is two matmuls (dX and dW); attention's twice its forward; any
# other kind's reads its inputs and dY and writes the input gradients at twice its forward's FLOPs.
Backward = Literal["matmul", "attention", "pointwise"]
# What its backward needs kept from the forward: the activations it read (not the weights), its output, its
# input, attention's own set (Q, K, V, O and the softmax statistics), or nothing.
Saved = Literal["activations_read", "output", "input", "attention", "nothing"]


@dataclass(frozen=True)
class Tensor:
    """A named tensor of a fusion graph."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def bytes(self) -> float:
        return self.elements * bytes_per_element(self.dtype)


class Wiring:
    """An operator's inputs and outputs in a fusion graph, with the checks every kind's shape reader uses."""

    def __init__(self, kind: str, inputs: Sequence[Tensor], outputs: Sequence[Tensor], where: str):
        self.kind, self.inputs, self.outputs, self.where = kind, list(inputs), list(outputs), where

    def fail(self, reason: str, side: str = "inputs"):
        raise CostModelError(f"{self.where}.{side}", reason)

    def expect(self, counts_in: Sequence[int], count_out: int = 1) -> None:
        if len(self.inputs) not in counts_in or len(self.outputs) != count_out:
            self.fail(f"{self.kind} takes {' or '.join(map(str, counts_in))} input(s) and {count_out} output(s)")

    def output_shape_is(self, shape: tuple[int, ...]) -> None:
        out = self.outputs[0]
        if out.shape != shape:
            self.fail(f"output {out.name} has shape {list(out.shape)}, expected {list(shape)}", "outputs")


@dataclass(frozen=True)
class OperatorKind:
    name: str
    summary: str  # what it is, in a few words: the CLI's help, the OpenAPI example's title, the docs
    cost: Callable[..., OperatorCost]
    unit: Unit  # the compute roof it runs against
    colour: str  # in charts that colour rows by kind
    fusion_role: FusionRole
    # The cost model's fields read off a fusion graph's tensors (None: the kind cannot be in a graph).
    fusion_fields: Callable[[Wiring], dict] | None
    backward: Backward
    saved_for_backward: Saved
    # Whether a batch computes many requests of this kind together as arrays (service/core/batched_matmul.py);
    # the others go one by one. tests/test_one_evaluation.py holds both paths to the same bytes.
    array_path: bool = False
