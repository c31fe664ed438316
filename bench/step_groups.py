"""Where costing a batch's model steps together starts to pay: `python bench/step_groups.py`.

For groups of 1 to 64 steps (Llama 3.1 8B prefill on the H100, distinct lengths), the microseconds per step of
answering them as one group of arrays (service/translation/models/batches.py) and one by one, in process, medians of
7 runs side by side. model_batches.MIN_GROUP is set from these figures.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ["ROOFLINE_DATABASE_URL"] = f"sqlite:///{tempfile.mkdtemp()}/groups.db"
os.environ["ROOFLINE_LOG_LEVEL"] = "WARNING"

from schemas.models import ModelAnalysisRequest
from service.cli.backends import LocalBackend
from service.translation.models.analyses import model_answer_json
from service.translation.models.batches import ModelStepAnswers

RUNS = 7


def per_step_us(answer_all, size: int) -> float:
    start = time.perf_counter()
    answer_all()
    return (time.perf_counter() - start) / size * 1e6


def main() -> None:
    backend = LocalBackend()
    catalog = backend._catalog
    print("steps in the group | together, us a step | one by one, us a step")
    print("---|---|---")
    lengths = iter(range(1000, 10**6))
    for size in (1, 2, 4, 8, 10, 16, 32, 64):
        together, alone = [], []
        for _ in range(RUNS):
            requests = [ModelAnalysisRequest.model_validate(
                {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "prefill", "batch_size": 1,
                 "seq_len": next(lengths)}) for _ in range(size)]

            def grouped(requests=requests, size=size):
                answers = ModelStepAnswers(enumerate(requests), catalog, min_group=1)
                for index in range(size):
                    answers.answer(index)

            together.append(per_step_us(grouped, size))
            alone.append(per_step_us(lambda requests=requests: [model_answer_json(request, catalog) for request in requests],
                                     size))
        print(f"{size} | {statistics.median(together):.0f} | {statistics.median(alone):.0f}")
    backend.close()


if __name__ == "__main__":
    main()
