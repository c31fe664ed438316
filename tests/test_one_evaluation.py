"""One evaluation, several speeds: every fast path answers what the normal path answers, byte for byte, over the
golden requests (every operator kind, every catalog family, every analysis endpoint, refusals too).

- the hot path (service/api/hot_path.py) against FastAPI's routes with it turned off;
- a batch (its plain matmuls and model steps costed together as arrays, the rest one by one) against each item's
  own endpoint;
- the array paths take exactly what the registries say they take (OperatorKind.array_path for operators,
  batched_steps.vectorisable for model steps); everything else falls back to the one-by-one path.
"""

from __future__ import annotations

import json
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from schemas.analysis import OperatorAnalysisRequest
from schemas.models import ModelAnalysisRequest
from schemas.operators import OPERATOR_KINDS
from service.core.operators.registry import OPERATORS
from service.core.transformer.batched_steps import vectorisable
from service.main import create_app
from service.persistence.migrate import upgrade
from service.runtime.config import Settings
from service.translation.models.analyses import model_answer_json
from service.translation.models.batches import ModelStepAnswers, is_plain_model_step
from service.translation.operators.matmul_batches import MatmulAnswers, is_plain_matmul
from tests.golden.record import TOKEN, load_requests

pytestmark = pytest.mark.dialect_free

BATCHED = {"/v1/analyze/operator": "operator", "/v1/analyze/model": "model", "/v1/analyze/kv-capacity": "kv-capacity",
           "/v1/analyze/fusion": "fusion", "/v1/analyze/training": "training", "/v1/analyze/sweep": "sweep",
           "/v1/analyze/compare": "compare", "/v1/plan/serving": "plan-serving", "/v1/plan/training": "plan-training"}


@pytest.fixture(scope="module")
def clients():
    """Two apps on one database, with and without the hot path, after the golden set's writes."""
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{Path(folder) / 'one.db'}"
        upgrade(url)
        apps = [create_app(Settings(database_url=url, api_tokens=f"golden={TOKEN}", hot_path=hot)) for hot in (True, False)]
        with TestClient(apps[0]) as hot, TestClient(apps[1]) as routes:
            for request in load_requests():
                if request["write"]:
                    assert hot.post(request["path"], json=request["body"],
                                    headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 201
            routes.app.state.catalog.refresh()
            yield hot, routes


def analyses() -> list[dict]:
    return [r for r in load_requests() if not r["write"] and not r["path"].startswith("/v1/plot/")]


def test_the_hot_path_answers_as_the_routes(clients):
    hot, routes = clients
    compared = 0
    for request in analyses():
        fast, normal = hot.post(request["path"], json=request["body"]), routes.post(request["path"], json=request["body"])
        assert (fast.status_code, fast.content) == (normal.status_code, normal.content), request["id"]
        compared += 1
    assert compared > 500


def test_a_batch_answers_each_item_as_its_endpoint(clients):
    hot, _ = clients
    by_analysis = defaultdict(list)
    for request in analyses():
        if request["path"] in BATCHED:
            by_analysis[BATCHED[request["path"]]].append(request)
    assert set(by_analysis) == set(BATCHED.values())
    for analysis, requests in by_analysis.items():
        response = hot.post("/v1/analyze/batch", json={"items": [
            {"id": r["id"], "analysis": analysis, "request": r["body"]} for r in requests]})
        assert response.status_code == 200, analysis
        for request, result in zip(requests, response.json()["results"], strict=True):
            single = hot.post(request["path"], json=request["body"])
            assert result["status"] == single.status_code, request["id"]
            if single.status_code == 200:
                # The item's answer is the endpoint's bytes: equal as parsed JSON, and every float to the bit.
                assert result["result"] == json.loads(single.content), request["id"]
            else:
                assert result["error"]["error"] == single.json()["error"], request["id"]


def test_the_array_paths_take_what_the_registries_say(clients):
    hot, _ = clients
    catalog = hot.app.state.catalog
    operators = [OperatorAnalysisRequest.model_validate(r["body"]) for r in analyses()
                 if r["path"] == "/v1/analyze/operator" and r["body"]["device_id"] in catalog._specs]
    kinds_seen = {request.operator.kind for request in operators}
    assert kinds_seen == set(OPERATOR_KINDS)
    plain = [(i, r) for i, r in enumerate(operators) if is_plain_matmul(r)]
    assert {r.operator.kind for _, r in plain} == {name for name, kind in OPERATORS.items() if kind.array_path}
    matmuls = MatmulAnswers(plain, catalog)
    answered = [i for i, _ in plain if matmuls.answer(i) is not None]
    for index in answered:
        assert matmuls.answer(index) == hot.post("/v1/analyze/operator", json=operators[index].model_dump(
            exclude_unset=True)).content, operators[index]
    # The array path answers the plain matmuls it can place exactly (not those on a device without their dtype's peak).
    assert len(answered) >= 30, (len(answered), len(plain))

    steps = [ModelAnalysisRequest.model_validate(r["body"]) for r in analyses()
             if r["path"] == "/v1/analyze/model" and "model_id" in r["body"]]
    answers = ModelStepAnswers(((i, s) for i, s in enumerate(steps) if is_plain_model_step(s)), catalog, min_group=1)
    taken = {steps[i].model_id for i in range(len(steps)) if answers.answer(i) is not None}
    for index, step in enumerate(steps):
        if answers.answer(index) is not None:
            assert answers.answer(index) == model_answer_json(step, catalog), step
    for model_id in {s.model_id for s in steps}:
        arch = catalog.derived(catalog.model(model_id), _architecture)
        assert (model_id in taken) == vectorisable(arch), model_id


def _architecture(row):
    from service.core.transformer.families import from_hf_config
    return from_hf_config(row.config)
