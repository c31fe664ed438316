"""A training plan's layout search: the request to the core's search, and its ranking back to the answer."""

from __future__ import annotations

from schemas.training import PLAN_ONLY, TrainingLayoutOut, TrainingPlanRequest, TrainingRequest, TrainingSearchOut
from service.core.errors import CostModelError
from service.core.training.search import Placed, SearchResult, search_layouts
from service.persistence.catalog import DeviceCatalog
from service.runtime.errors import Unprocessable
from service.translation.models.analyses import unprocessable
from service.translation.training.analyses import training_inputs

# What a search chooses: a request that searches may not also give them.
LAYOUT_FIELDS = ("tensor_parallel", "pipeline_parallel", "pipeline_schedule", "virtual_pipeline_stages",
                 "context_parallel", "expert_parallel", "sequence_parallel", "recompute", "gradient_accumulation_steps",
                 "first_stage_layers", "last_stage_layers")


def _refuse(loc: str, reason: str) -> Unprocessable:
    return Unprocessable(reason, [{"loc": f"body.{loc}", "msg": reason}])


def _global_sequences(request: TrainingPlanRequest) -> int:
    if request.global_batch_tokens is None:
        raise _refuse("global_batch_tokens", "a layout search holds the global batch fixed across layouts: give "
                                             "global_batch_tokens")
    sequences, left = divmod(request.global_batch_tokens, request.seq_len * request.micro_batch_size)
    if left or not sequences:
        raise _refuse("global_batch_tokens", f"{request.global_batch_tokens:,} tokens are not a whole number of "
                                             f"micro-batches of {request.micro_batch_size} x {request.seq_len} tokens")
    return sequences


def layout_out(placed: Placed) -> TrainingLayoutOut:
    par, step, memory = placed.layout.parallelism, placed.step, placed.step.memory
    return TrainingLayoutOut(
        data_parallel=par.data, tensor_parallel=par.tensor, sequence_parallel=par.sequence_parallel,
        pipeline_parallel=par.pipeline, pipeline_schedule=placed.layout.schedule.name,
        virtual_pipeline_stages=placed.layout.schedule.virtual_stages, context_parallel=par.context,
        expert_parallel=par.expert, recompute=placed.recompute, gradient_accumulation_steps=placed.layout.micro_batches,
        step_time_s=step.step_time_s, tokens_per_s=step.tokens_per_s, mfu=step.mfu,
        bubble_fraction=step.bubble_fraction, required_bytes=memory.required_bytes, usable_bytes=memory.usable_bytes,
        fits=memory.fits)


def _words(placed: Placed) -> str:
    par, schedule = placed.layout.parallelism, placed.layout.schedule
    return (f"{par.data} DP x {par.tensor} TP{' (SP)' if par.sequence_parallel else ''} x {par.pipeline} PP "
            f"{schedule.name}{f' v={schedule.virtual_stages}' if schedule.virtual_stages > 1 else ''}"
            f"{f' x {par.context} CP' if par.context > 1 else ''}{f', EP {par.expert}' if par.expert > 1 else ''}"
            f", recompute {placed.recompute}")


def _binding(result: SearchResult) -> str:
    best = result.ranked[0]
    if result.faster_unfitting is not None:
        faster = result.faster_unfitting
        return (f"memory: {_words(faster)} would take {faster.step.step_time_s:.4g} s a step against "
                f"{best.step.step_time_s:.4g} s, but needs {faster.step.memory.required_bytes / 1e9:.4g} GB per device "
                f"of {faster.step.memory.usable_bytes / 1e9:.4g} usable")
    time = best.step
    bubble = time.pipeline_time_s * time.bubble_fraction
    exposed = time.data_parallel_exposed_s
    return (f"the roofline itself: the fastest of the {result.searched} layouts searched fits; of its "
            f"{time.step_time_s:.4g} s, {bubble:.3g} s is pipeline bubble and {exposed:.3g} s exposed data-parallel "
            "sync, the rest the micro-batches' rows and their collectives")


def search_plan(request: TrainingPlanRequest, catalog: DeviceCatalog) -> tuple[TrainingRequest, TrainingSearchOut]:
    """The fastest layout that fits, as the training request of the plan's step, and the search's ranking."""
    given = sorted(set(LAYOUT_FIELDS) & request.model_fields_set)
    if given:
        raise _refuse(given[0], f"a layout search chooses {', '.join(given)}: leave {'them' if len(given) > 1 else 'it'}"
                                " out, or turn search off")
    sequences = _global_sequences(request)
    body = request.model_dump(exclude=PLAN_ONLY, exclude_unset=True)
    base = training_inputs(TrainingRequest.model_validate({**body, "data_parallel": 1, "global_batch_tokens": None,
                                                           "gradient_accumulation_steps": 1}), catalog)
    try:
        result = search_layouts(base.arch, base.evaluator, base.topology, base.setup, request.num_devices, sequences,
                                request.top_n)
    except CostModelError as exc:
        raise unprocessable(exc, "body") from None
    if not result.ranked:
        closest = result.least_memory
        reason = (f"no layout of {request.num_devices} devices fits in memory ({result.searched} searched)"
                  + (f": the closest, {_words(closest)}, needs {closest.step.memory.required_bytes / 1e9:.4g} GB per "
                     f"device of {closest.step.memory.usable_bytes / 1e9:.4g} usable; more devices, a smaller "
                     "micro-batch or a higher zero_stage" if closest else ""))
        raise _refuse("num_devices", reason)
    best = result.ranked[0]
    par, schedule = best.layout.parallelism, best.layout.schedule
    step_request = TrainingRequest.model_validate({
        **body, "data_parallel": par.data, "tensor_parallel": par.tensor, "pipeline_parallel": par.pipeline,
        "pipeline_schedule": schedule.name, "virtual_pipeline_stages": schedule.virtual_stages,
        "context_parallel": par.context, "expert_parallel": par.expert, "sequence_parallel": par.sequence_parallel,
        "recompute": best.recompute, "gradient_accumulation_steps": best.layout.micro_batches})
    return step_request, TrainingSearchOut(
        searched=result.searched, refused=result.refused, layouts=[layout_out(p) for p in result.ranked],
        faster_unfitting=layout_out(result.faster_unfitting) if result.faster_unfitting else None,
        binding=_binding(result))
