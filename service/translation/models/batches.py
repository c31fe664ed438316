"""A batch's model steps answered together: steps of one catalog model with the same phase, dtypes and
parallelism are costed as arrays, each on its own device's roofs (service/core/transformer/batched_steps.py), and
each is written by model_answer_json from its own analysis, the same bytes /v1/analyze/model answers.

A step is taken when it names a catalog model (an inline config is parsed per request) and asks for no output_len
(its end-to-end time sums the decode steps one by one). A group that cannot be costed as arrays (an unknown model
or device, a missing roof, a mixture-of-experts model) and a step outside the arrays' exact domain or past its
model's positions are left to the per-step path, which answers or refuses them in its own words.
"""

from __future__ import annotations

from collections.abc import Iterable

import orjson

from schemas.models import ModelAnalysisRequest
from service.core.errors import CostModelError
from service.core.transformer.analysis import Evaluator
from service.core.transformer.batched_steps import BOUNDS, NUMBERS, NotVectorisable, SteppedRows
from service.core.transformer.capacity import check_positions
from service.persistence.catalog import DeviceCatalog
from service.runtime.errors import ServiceError
from service.translation.batch_groups import built_groups
from service.translation.models.analyses import (
    ROW_FIELDS,
    catalog_model,
    core_dtypes,
    evaluator_for,
    model_answer_json,
    peak_context,
)
from service.translation.models.step_expectations import steps_expected
from service.translation.plain_fields import json_bytes

# Steps that agree on these (and on their dtypes) form one group; the arrays run over the steps' lengths and each
# step's evaluator (its device, roofs and what-ifs).
GROUP_FIELDS = ("model_id", "phase", "tensor_parallel", "attention_implementation")
EVALUATOR_FIELDS = ("device_id", "roofs", "sustained_clock_hz", "collective_latency_s")
STEP_FIELDS = ("batch_size", "seq_len")
# Read per step by model_answer_json, after the rows (memory, what-ifs, achieved), or required to be absent.
ANSWER_FIELDS = ("dtypes", "memory_utilization", "memory_capacity_bytes", "workspace_bytes", "block_size", "profile_tokens",
                 "measured_time_s", "speedups", "model", "output_len", "engine", "calibration", "rope_scaling")
if set(ModelAnalysisRequest.model_fields) != {*GROUP_FIELDS, *EVALUATOR_FIELDS, *STEP_FIELDS, *ANSWER_FIELDS}:
    raise ImportError("service.translation.models.batches does not know every model request field: "
                      f"{sorted(ModelAnalysisRequest.model_fields)}")
# Below this many steps a group goes one by one: the arrays cost about a millisecond a group whatever its size (a few
# hundred small array operations), a step alone 140-230 us (bench/step_groups.py: in groups of 4 a step costs about
# 1.5-2 times what it costs alone, of 8 about the same, of 32 half).
MIN_GROUP = 10
# A row's numbers as its JSON writes them: RowOut's numbers are the first of NUMBERS, the bound among them as a code.
WRITTEN = len(ROW_FIELDS) - 5
if NUMBERS[:WRITTEN] != ROW_FIELDS[5:]:
    raise ImportError(f"RowOut's numbers must be batched_steps.NUMBERS' first, in order: {ROW_FIELDS[5:]}")
BOUND_AT = NUMBERS.index("bound")
FLOPS_AT, BYTES_AT, TIME_AT = NUMBERS.index("flops"), NUMBERS.index("bytes"), NUMBERS.index("time_s")
BOUND_TEXTS = {json_bytes(float(code)): json_bytes(bound) for code, bound in enumerate(BOUNDS)}


def is_plain_model_step(request) -> bool:
    # A catalog model as configured: a RoPE scaling makes it another model (its positions), answered one by one.
    return (isinstance(request, ModelAnalysisRequest) and request.model_id is not None and request.output_len is None
            and request.rope_scaling is None)


def _group_key(request: ModelAnalysisRequest) -> tuple:
    # Whether the request named its dtypes decides between them and a checkpoint's own formats.
    return (*(getattr(request, name) for name in GROUP_FIELDS), core_dtypes(request), "dtypes" in request.model_fields_set)


def _rows_template(steps: SteppedRows) -> bytes:
    """A step's rows as JSON with a %s for each number, as model_answer_json writes RowOut's fields."""
    rows = []
    for shape in steps.shapes:
        statics = (json_bytes(value).replace(b"%", b"%%") for value in shape[:5])
        head = b",".join(b'"%s":%s' % (name.encode(), text) for name, text in zip(ROW_FIELDS, statics))
        tail = b",".join(b'"%s":%%s' % name.encode() for name in ROW_FIELDS[5:])
        rows.append(b"{%s,%s}" % (head, tail))
    return b"[%s]" % b",".join(rows)


class _Group:
    def __init__(self, requests: list[ModelAnalysisRequest], catalog: DeviceCatalog):
        first = requests[0]
        assert first.model_id is not None  # a plain model step names a catalog model
        row, self.arch = catalog_model(catalog, first.model_id)
        self.name = row.id
        evaluators: list[Evaluator] = []
        which: list[int] = []
        seen: dict[int, int] = {}
        for request in requests:
            evaluator = evaluator_for(request, catalog)
            if id(evaluator) not in seen:
                seen[id(evaluator)] = len(evaluators)
                evaluators.append(evaluator)
            which.append(seen[id(evaluator)])
        self.requests = requests
        self.steps = SteppedRows(self.arch, evaluators, which, phase=first.phase,
                                 batch=[r.batch_size for r in requests], seq_len=[r.seq_len for r in requests],
                                 dtypes=core_dtypes(first, self.arch), tensor_parallel=first.tensor_parallel,
                                 attention_implementation=first.attention_implementation)
        self.template = _rows_template(self.steps)
        self._expectations: dict[tuple, dict[int, dict | None]] = {}

    def answer(self, at: int, catalog: DeviceCatalog) -> bytes | None:
        """Step `at`'s answer, or None where the per-step path must answer it."""
        request, steps = self.requests[at], self.steps
        if not steps.exact[at]:
            return None
        try:
            check_positions(self.arch, *peak_context(request))
        except CostModelError:
            return None
        written = bool(request.speedups)  # the what-ifs read the rows themselves
        analysed = (self.name, self.arch, steps.result(at, with_rows=written), None)
        if written:
            return model_answer_json(request, catalog, analysed)
        # numpy's floats are written as Python's are (tests/translation/test_json_bytes.py).
        numbers = json_bytes(steps.numbers[at, :, :WRITTEN].ravel(), numpy=True)[1:-1].split(b",")
        numbers[BOUND_AT::WRITTEN] = [BOUND_TEXTS[code] for code in numbers[BOUND_AT::WRITTEN]]
        return model_answer_json(request, catalog, analysed, rows_json=self.template % tuple(numbers),
                                 expected=self._expected(at, catalog))

    def _expected(self, at: int, catalog: DeviceCatalog) -> dict | None:
        """Step `at`'s expectation, worked out with every step of the group on its device and engine."""
        request = self.requests[at]
        key = (request.device_id, request.engine)
        if key not in self._expectations:
            chosen = [i for i, other in enumerate(self.requests) if (other.device_id, other.engine) == key]
            numbers = self.steps.numbers[chosen]
            answers = steps_expected(self.steps.shapes, numbers[:, :, FLOPS_AT], numbers[:, :, BYTES_AT],
                                     numbers[:, :, TIME_AT], device_id=request.device_id,
                                     measured=catalog.measured(request.device_id), engine=request.engine)
            self._expectations[key] = dict(zip(chosen, answers, strict=True))
        return self._expectations[key][at]


class ModelStepAnswers:
    """The plain model steps among a batch's items, costed together; `answer(index)` writes one, or None where the
    per-step path must answer it."""

    def __init__(self, items: Iterable[tuple[int, ModelAnalysisRequest]], catalog: DeviceCatalog,
                 min_group: int = MIN_GROUP):
        self._catalog = catalog
        self._at: dict[int, tuple[_Group, int]] = {}
        # A group refused here is answered or refused one by one, in the per-step path's words.
        refusals = (ServiceError, CostModelError, NotVectorisable)
        for group, indices in built_groups(items, _group_key, lambda _, requests: _Group(requests, catalog),
                                           min_members=min_group, refusals=refusals):
            self._at.update((index, (group, at)) for at, index in enumerate(indices))

    def __len__(self) -> int:
        return len(self._at)

    def answer(self, index: int) -> bytes | None:
        found = self._at.get(index)
        if found is None:
            return None
        group, at = found
        try:
            return group.answer(at, self._catalog)
        except orjson.JSONEncodeError:  # a value orjson refuses: the per-step path writes it as pydantic does
            return None
