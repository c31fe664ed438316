"""A batch's plain matmuls answered together: grouped by device and options, computed as arrays
(service/core/batched_matmul.py), each written as the same bytes /v1/analyze/operator answers.

A plain matmul asks for no what-if (bytes_by_level, sustained_clock_hz, measured_time_s). A group whose roofs
cannot be had (an unknown device, a missing peak) and a matmul outside the arrays' exact domain are left to the
per-operator path, which answers or refuses them in its own words.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from operator import attrgetter

import numpy as np

from schemas.analysis import OperatorAnalysisRequest
from schemas.operators import MatmulOp
from service.core.batched_matmul import MatmulGroupSpec, MatmulShapes, matmul_rooflines
from service.core.errors import CostModelError
from service.core.hardware import DeviceSpec, Unit
from service.core.memo import ByIdentity
from service.core.operators.matmul import matmul_notes, matmul_operands
from service.core.operators.registry import OPERATORS
from service.core.roofline import HBM, Bound, LevelCeiling, roof_notes
from service.core.roofs import (
    ComputeRoof,
    MeasuredRoofs,
    RoofMode,
    require_memory_roof,
    select_compute_roof,
    select_memory_roof,
)
from service.persistence.catalog import DeviceCatalog
from service.runtime.errors import ServiceError
from service.translation.batch_groups import built_groups
from service.translation.operators.analyses import (
    answer_fields,
    calibration_for,
    compute_roof_fields,
    expected_fields,
    level_fields,
    memory_roof_fields,
    operator_fields,
    shape_fields,
)
from service.translation.plain_fields import json_bytes

L2 = "l2"
MEMORY_TEXT, COMPUTE_TEXT, L2_TEXT, HBM_TEXT, NULL_TEXT = (json_bytes(value) for value in (
    str(Bound.memory), str(Bound.compute), L2, HBM, None))
# The values of an answer that are written per matmul as JSON text, not taken from a column of numbers.
PER_MATMUL_TEXT = frozenset({"bound", "binding_level", "assumptions", "tiles", "extrapolated"})
SHAPE_FIELDS = ("m", "n", "k", "batch")
# Matmuls that agree on these (and on the device, the roof mode and the tile) form one group.
OPTION_FIELDS = ("bias", "dtype", "a_dtype", "b_dtype", "c_dtype", "compute_dtype", "weight_shared", "weight_group_size",
                 "weight_scale_bytes", "apply_efficiency")
_options, _shape = attrgetter(*OPTION_FIELDS), attrgetter(*SHAPE_FIELDS)
# A field added to the matmul's request must be placed here, as a shape or an option, or groups would mix its values.
if set(MatmulOp.model_fields) != {"kind", "tile", *SHAPE_FIELDS, *OPTION_FIELDS}:
    raise ImportError(f"service.translation.operators.matmul_batches does not know every matmul field: {sorted(MatmulOp.model_fields)}")


def is_plain_matmul(request) -> bool:
    return (isinstance(request, OperatorAnalysisRequest) and OPERATORS[request.operator.kind].array_path
            and request.bytes_by_level is None and request.sustained_clock_hz is None
            and request.measured_time_s is None and request.engine is None and request.calibration == "auto")


def _group_key(request: OperatorAnalysisRequest) -> tuple:
    operator = request.operator
    tile = operator.tile
    return request.device_id, request.roofs, _options(operator), (tile.m, tile.n, tile.k) if tile else None


class _Plan:
    """What a group's matmuls share, worked out once per device, measured roofs and options (the same few groups
    recur in every batch): roofs, words, and the answer's template, with a %s for each value that differs
    between matmuls, written by answer_fields itself (each such value a unique marker)."""

    def __init__(self, device: DeviceSpec, measured: MeasuredRoofs, roofs: str, options: tuple, tile: tuple | None):
        self.device = device
        self.mode = mode = RoofMode(roofs)
        # The group's options as a matmul of unit shape: operator_fields derives the cost model's arguments.
        operator = MatmulOp(kind="matmul", m=1, n=1, k=1, **dict(zip(OPTION_FIELDS, options)),
                            tile=dict(zip("mnk", tile)) if tile else None)
        fields = operator_fields(operator, device)
        operands = matmul_operands(fields["dtype"], fields.get("a_dtype"), fields.get("b_dtype"), fields.get("c_dtype"),
                                   fields.get("compute_dtype"), fields.get("b_bytes_per_element"))
        self.tile = tile = fields["tile"]
        self.calibration = calibration_for(device.id, "matmul", operands.compute_dtype)
        self.apply_efficiency = operator.apply_efficiency
        self.compute, select_notes = select_compute_roof(device, measured, operands.compute_dtype, Unit.tensor, mode)
        self.select_notes = list(select_notes)
        self.hbm = require_memory_roof(device, measured, HBM, mode)
        self.l2 = select_memory_roof(device, measured, L2, mode)
        self.cost_notes = matmul_notes(operator.bias, operator.weight_shared, operands.a_dtype, operands.b_dtype,
                                       operands.c_dtype, operands.compute_dtype, (tile[0], tile[1]))
        self.mfu_notes = [] if self.compute.nominal_flops_per_s is not None else [
            f"mfu: not defined, device {device.id} lists no nominal {self.compute.dtype} {self.compute.unit} peak"]
        # The levels whose roofs the notes name (only their roofs are read).
        self.ceilings = [LevelCeiling(roof, 0.0, 0.0, 0.0, 0.0) for roof in (self.hbm, self.l2) if roof is not None]
        self.fixed_roof_notes = roof_notes(self.compute, self.ceilings)
        # The assumptions of a matmul whose compute roof is not scaled, around its one note of its own (the L2 traffic
        # no roof bounds), as JSON text.
        self.assumptions_head = b",".join(map(json_bytes, [*self.cost_notes, *self.select_notes, *self.mfu_notes]))
        self.assumptions_tail = b",".join(map(json_bytes, self.fixed_roof_notes))
        self.spec = MatmulGroupSpec(operands.s_a, operands.s_b, operands.s_c, operator.bias, operator.weight_shared,
                                    tile, device.sm_count, self.apply_efficiency, self.compute, self.hbm, self.l2)
        self._write_template()

    def _write_template(self) -> None:
        markers: dict[bytes, str] = {}

        def marker(name: str, text: bool = False):
            value = f"@{name}@" if text else float(f"9.{len(markers) + 1:03d}e-300")
            markers[json_bytes(value)] = name
            return value

        levels = [level_fields(self.hbm, marker("bytes_total"), marker("hbm_time_s"), marker("hbm_intensity"),
                               marker("hbm_ridge"))]
        if self.l2 is not None:
            levels.append(level_fields(self.l2, marker("l2_bytes"), marker("l2_time_s"), marker("l2_intensity"),
                                       marker("l2_ridge")))
        compute = {**compute_roof_fields(self.compute), "flops_per_s": marker("flops_per_s")}
        waves = self.device.sm_count  # the waves and their efficiency are counted where the SMs are known
        shape = shape_fields(self.tile, marker("padding_efficiency"), marker("model_flops"), marker("executed_flops"),
                             self.apply_efficiency, tiles=marker("tiles"), sm_count=self.device.sm_count,
                             waves=marker("waves") if waves else None,
                             wave_efficiency=marker("wave_efficiency") if waves else None)
        probe = json_bytes(answer_fields(
            self.device.id, "matmul", marker("flops"), marker("bytes_read"), marker("bytes_written"),
            marker("bytes_total"), marker("hbm_intensity"), marker("hbm_ridge"), marker("bound", True),
            marker("attainable_flops_per_s"), marker("compute_time_s"), marker("hbm_time_s"), marker("time_s"),
            marker("mfu") if self.compute.nominal_flops_per_s else None, compute, memory_roof_fields(self.hbm),
            marker("binding_level", True), levels, None, shape, marker("assumptions", True),
            expected_fields(self.calibration, marker("expected_time_s"), marker("extrapolated", True))
            if self.calibration else None))
        # A marker is a whole JSON value (a device id such as "9.001e-300" is text inside quotes, not a value).
        pieces = re.split(b"(?<=[:,\\[])(" + b"|".join(map(re.escape, markers)) + b")(?=[,\\]}])", probe)
        names = [markers[piece] for piece in pieces[1::2]]
        if len(names) != len(markers):
            raise CostModelError("operator", "the answer's template is ambiguous: answered one by one")
        self.template = b"%s".join(piece.replace(b"%", b"%%") for piece in pieces[::2])
        # A matmul's numbers come as one JSON text of floats in the template's order; the count of tiles, an int,
        # and the texts made per matmul (PER_MATMUL_TEXT) go between them where `cuts` says.
        self.numeric = [name for name in names if name not in PER_MATMUL_TEXT]
        self.cuts: list[tuple[int, int, str]] = []
        start = 0
        for position, name in enumerate(names):
            if name in PER_MATMUL_TEXT:
                end = position - len(self.cuts)
                self.cuts.append((start, end, name))
                start = end


_plan = ByIdentity(_Plan, objects=2, limit=256)


class _Group:
    """A group's matmuls: their numbers (computed as arrays) as JSON text, and what each answer needs besides."""

    def __init__(self, key: tuple, requests: list[OperatorAnalysisRequest], catalog: DeviceCatalog):
        device_id, roofs, options, tile = key
        device = catalog.get(device_id)
        self.plan = plan = _plan(device, catalog.measured(device.id), roofs, options, tile)
        shapes = MatmulShapes(*np.array([_shape(r.operator) for r in requests], dtype=np.int64).T)
        numbers = matmul_rooflines(shapes, plan.spec)
        self.exact, self.efficiency, self.flops_per_s, self.l2_bytes, self.memory_bound, self.l2_binds = (
            getattr(numbers, name).tolist()
            for name in ("exact", "efficiency", "flops_per_s", "l2_bytes", "memory_bound", "l2_binds"))
        # numpy's floats are written as Python's are (tests/translation/test_json_bytes.py).
        columns = {name: getattr(numbers, name) for name in plan.numeric if name != "expected_time_s"}
        if plan.calibration is not None:  # as roofline_fields puts it: the fit, or the bound where that is higher
            columns["expected_time_s"] = np.maximum(plan.calibration.expected_times_as_one_s(
                numbers.flops.tolist(), numbers.bytes_total.tolist(), shapes.m.tolist(), shapes.n.tolist(),
                shapes.k.tolist()), numbers.time_s)
        matrix = np.stack([columns[name] for name in plan.numeric], axis=1).astype(np.float64)
        self.number_texts = json_bytes(matrix, numpy=True)[2:-2].split(b"],[")
        self.tiles_texts = json_bytes(numbers.tiles, numpy=True)[1:-1].split(b",")
        calibration = plan.calibration
        spans = calibration.shapes if calibration is not None else None
        outside = (np.zeros(len(requests), dtype=bool) if not spans else np.any(
            [(size < low) | (size > high) for size, (low, high) in zip((shapes.m, shapes.n, shapes.k), spans,
                                                                      strict=True)], axis=0))
        if calibration is not None and calibration.unidentified:  # as roofline_fields says it, one by one
            outside = np.array([calibration.outside(flops, moved, (m, n, k)) for flops, moved, m, n, k in zip(
                numbers.flops.tolist(), numbers.bytes_total.tolist(), shapes.m.tolist(), shapes.n.tolist(),
                shapes.k.tolist(), strict=True)], dtype=bool)
        self.extrapolated_texts = [b"true" if flag else b"false" for flag in outside.tolist()]

    def answer(self, at: int) -> bytes:
        """The matmul's answer, as analyze() and operator_analysis_fields() put it together."""
        plan = self.plan
        level_notes = [] if plan.l2 is not None else [
            f"{L2} traffic ({self.l2_bytes[at]:.4g} bytes) not bounded: device {plan.device.id} has no {plan.mode} "
            f"{L2} bandwidth"]
        efficiency = self.efficiency[at]
        if efficiency < 1.0:
            compute = plan.compute
            scaled = ComputeRoof(self.flops_per_s[at], compute.dtype, compute.unit, compute.source, compute.citation,
                                 compute.nominal_flops_per_s)
            assumptions = json_bytes([
                *plan.cost_notes, *plan.select_notes,
                f"shape: compute roof scaled by the padding efficiency {efficiency:.4f}",
                *plan.mfu_notes, *level_notes, *roof_notes(scaled, plan.ceilings)])
        else:
            assumptions = b"[%s]" % b",".join([plan.assumptions_head, *map(json_bytes, level_notes), plan.assumptions_tail])
        memory_bound = self.memory_bound[at]
        texts = {
            "bound": MEMORY_TEXT if memory_bound else COMPUTE_TEXT,
            "binding_level": (L2_TEXT if self.l2_binds[at] else HBM_TEXT) if memory_bound else NULL_TEXT,
            "assumptions": assumptions,
            "tiles": self.tiles_texts[at],
            "extrapolated": self.extrapolated_texts[at],
        }
        numbers = self.number_texts[at].split(b",")
        values = []
        for start, end, name in plan.cuts:
            values += numbers[start:end]
            values.append(texts[name])
        values += numbers[plan.cuts[-1][1]:]
        return plan.template % tuple(values)


class MatmulAnswers:
    """The plain matmuls among a batch's items, computed together; `answer(index)` writes one, or None where the
    per-operator path must answer it."""

    def __init__(self, items: Iterable[tuple[int, OperatorAnalysisRequest]], catalog: DeviceCatalog):
        self._at: dict[int, tuple[_Group, int]] = {}
        # A lone matmul costs less one by one; a refused group is answered one by one, in the per-operator path's words.
        for group, indices in built_groups(items, _group_key, lambda key, requests: _Group(key, requests, catalog),
                                           min_members=2, refusals=(ServiceError, CostModelError)):
            self._at.update((index, (group, at)) for at, index in enumerate(indices) if group.exact[at])

    def __len__(self) -> int:
        return len(self._at)

    def answer(self, index: int) -> bytes | None:
        found = self._at.get(index)
        return None if found is None else found[0].answer(found[1])
