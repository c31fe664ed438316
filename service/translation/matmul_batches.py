"""A batch's plain matmuls answered together: grouped by device and options, computed as arrays
(service/core/batched_matmul.py), each written as the same bytes /v1/analyze/operator answers.

A plain matmul asks for no what-if (bytes_by_level, sustained_clock_hz, measured_time_s). A group whose roofs
cannot be had (an unknown device, a missing peak) and a matmul outside the arrays' exact domain are left to the
per-operator path, which answers or refuses them in its own words.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from itertools import repeat
from operator import attrgetter

import numpy as np

from schemas.analysis import OperatorAnalysisRequest
from schemas.operators import MatmulOp
from service.core.batched_matmul import MatmulGroupSpec, MatmulRooflines, MatmulShapes, matmul_rooflines
from service.core.errors import CostModelError
from service.core.hardware import Unit
from service.core.operators.matmul import matmul_notes, matmul_operands
from service.core.roofline import HBM, Bound, LevelCeiling, roof_notes
from service.core.roofs import ComputeRoof, RoofMode, require_memory_roof, select_compute_roof, select_memory_roof
from service.persistence.catalog import DeviceCatalog
from service.runtime.errors import ServiceError
from service.runtime.observability import log_unexpected
from service.translation.operator_analyses import (
    answer_fields, compute_roof_fields, level_fields, memory_roof_fields, operator_fields, shape_fields,
)
from service.translation.plain_fields import json_bytes

L2 = "l2"
MEMORY, COMPUTE = str(Bound.memory), str(Bound.compute)
SHAPE_FIELDS = ("m", "n", "k", "batch")
# Matmuls that agree on these (and on the device, the roof mode and the tile) form one group.
OPTION_FIELDS = ("bias", "dtype", "a_dtype", "b_dtype", "c_dtype", "compute_dtype", "weight_shared", "weight_group_size",
                 "weight_scale_bytes", "apply_efficiency")
_options, _shape = attrgetter(*OPTION_FIELDS), attrgetter(*SHAPE_FIELDS)
# A field added to the matmul's request must be placed here, as a shape or an option, or groups would mix its values.
if set(MatmulOp.model_fields) != {"kind", "tile", *SHAPE_FIELDS, *OPTION_FIELDS}:
    raise ImportError(f"service.translation.matmul_batches does not know every matmul field: {sorted(MatmulOp.model_fields)}")


def is_plain_matmul(request) -> bool:
    return (isinstance(request, OperatorAnalysisRequest) and request.operator.kind == "matmul"
            and request.bytes_by_level is None and request.sustained_clock_hz is None
            and request.measured_time_s is None)


def _group_key(request: OperatorAnalysisRequest) -> tuple:
    operator = request.operator
    tile = operator.tile
    return request.device_id, request.roofs, _options(operator), (tile.m, tile.n, tile.k) if tile else None


class _Group:
    """One group's shared roofs and words, and its matmuls' numbers as lists (indexed by position)."""

    def __init__(self, requests: list[OperatorAnalysisRequest], catalog: DeviceCatalog):
        first = requests[0]
        self.device = device = catalog.get(first.device_id)
        measured = catalog.measured(device.id)
        self.mode = mode = RoofMode(first.roofs)
        fields = operator_fields(first.operator, device)
        operands = matmul_operands(fields["dtype"], fields.get("a_dtype"), fields.get("b_dtype"), fields.get("c_dtype"),
                                   fields.get("compute_dtype"), fields.get("b_bytes_per_element"))
        self.tile = tile = fields["tile"]
        self.apply_efficiency = first.operator.apply_efficiency
        self.compute, select_notes = select_compute_roof(device, measured, operands.compute_dtype, Unit.tensor, mode)
        self.select_notes = list(select_notes)
        self.hbm = require_memory_roof(device, measured, HBM, mode)
        self.l2 = select_memory_roof(device, measured, L2, mode)
        self.cost_notes = matmul_notes(first.operator.bias, first.operator.weight_shared, operands.a_dtype,
                                       operands.b_dtype, operands.c_dtype, operands.compute_dtype, (tile[0], tile[1]))
        self.compute_fields, self.memory_fields = compute_roof_fields(self.compute), memory_roof_fields(self.hbm)
        self.mfu_notes = [] if self.compute.nominal_flops_per_s is not None else [
            f"mfu: not defined, device {device.id} lists no nominal {self.compute.dtype} {self.compute.unit} peak"]
        # The levels whose roofs the notes name (only the roofs are read).
        self.hbm_only = [LevelCeiling(self.hbm, 0.0, 0.0, 0.0, 0.0)]
        self.hbm_and_l2 = self.hbm_only + ([LevelCeiling(self.l2, 0.0, 0.0, 0.0, 0.0)] if self.l2 else [])
        shapes = MatmulShapes(*np.array([_shape(r.operator) for r in requests], dtype=np.int64).T)
        spec = MatmulGroupSpec(operands.s_a, operands.s_b, operands.s_c, first.operator.bias,
                               first.operator.weight_shared, tile, device.sm_count, self.apply_efficiency,
                               self.compute, self.hbm, self.l2)
        numbers = matmul_rooflines(shapes, spec)
        # One row of Python numbers per matmul, as the per-operator path holds them (ints stay ints until its
        # answer makes them floats).
        columns = [value.tolist() if isinstance(value, np.ndarray) else repeat(value) for value in numbers]
        self.rows = list(map(MatmulRooflines._make, zip(*columns)))

    def answer(self, at: int) -> bytes:
        """The matmul's answer, as analyze() and operator_analysis_fields() put it together."""
        v = self.rows[at]
        notes = self.select_notes
        compute = self.compute
        if v.efficiency < 1.0:
            compute = ComputeRoof(v.flops_per_s, compute.dtype, compute.unit, compute.source, compute.citation,
                                  compute.nominal_flops_per_s)
            notes = [*notes, f"shape: compute roof scaled by the padding and wave efficiency {v.efficiency:.4f}"]
            compute_fields = compute_roof_fields(compute)
        else:
            compute_fields = self.compute_fields
        levels = [level_fields(self.hbm, v.bytes_total, v.hbm_time_s, v.hbm_intensity, v.hbm_ridge)]
        if self.l2 is None:
            level_notes = [f"{L2} traffic ({v.l2_bytes:.4g} bytes) not bounded: device {self.device.id} has no "
                           f"{self.mode} {L2} bandwidth"]
            ceilings = self.hbm_only
        else:
            level_notes = []
            levels.append(level_fields(self.l2, v.l2_bytes, v.l2_time_s, v.l2_intensity, v.l2_ridge))
            ceilings = self.hbm_and_l2
        shape = shape_fields(self.tile, v.padding_efficiency, v.model_flops, v.executed_flops, self.apply_efficiency,
                             tiles=v.tiles, sm_count=self.device.sm_count, waves=v.waves, wave_efficiency=v.wave_efficiency)
        return json_bytes(answer_fields(
            self.device.id, "matmul", v.flops, v.bytes_read, v.bytes_written, v.bytes_total, v.hbm_intensity,
            v.hbm_ridge, MEMORY if v.memory_bound else COMPUTE, v.attainable_flops_per_s, v.compute_time_s,
            v.hbm_time_s, v.time_s, v.mfu, compute_fields, self.memory_fields,
            (L2 if v.l2_binds else HBM) if v.memory_bound else None, levels, None, shape,
            [*self.cost_notes, *notes, *self.mfu_notes, *level_notes, *roof_notes(compute, ceilings)]))


class MatmulAnswers:
    """The plain matmuls among a batch's items, computed together; `answer(index)` writes one, or None where the
    per-operator path must answer it."""

    def __init__(self, items: Iterable[tuple[int, OperatorAnalysisRequest]], catalog: DeviceCatalog):
        grouped: dict[tuple, list[tuple[int, OperatorAnalysisRequest]]] = defaultdict(list)
        for index, request in items:
            grouped[_group_key(request)].append((index, request))
        self._at: dict[int, tuple[_Group, int]] = {}
        for members in grouped.values():
            if len(members) < 2:
                continue  # one matmul costs less one by one
            try:
                group = _Group([request for _, request in members], catalog)
            except (ServiceError, CostModelError):
                continue  # refused one by one, in the per-operator path's words
            except Exception as exc:  # a defect here must not cost the batch: logged, and answered one by one
                log_unexpected(exc)
                continue
            self._at.update((index, (group, at)) for at, (index, _) in enumerate(members) if group.rows[at].exact)

    def __len__(self) -> int:
        return len(self._at)

    def answer(self, index: int) -> bytes | None:
        found = self._at.get(index)
        return None if found is None else found[0].answer(found[1])
