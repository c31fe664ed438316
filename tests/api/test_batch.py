"""POST /v1/analyze/batch: each item answered as its own endpoint would, in order, errors per item."""

OPERATOR = {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}
MODEL = {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b", "phase": "decode", "batch_size": 32,
         "seq_len": 4096}


def test_each_item_is_answered_as_its_endpoint_would_in_order(client):
    items = [
        {"id": "gemv", "analysis": "operator", "request": OPERATOR},
        {"id": "decode", "analysis": "model", "request": MODEL},
        {"id": "typo", "analysis": "operator", "request": {**OPERATOR, "operator": {"kind": "matmul", "m": 0, "n": 1, "k": 1}}},
        {"id": "nowhere", "analysis": "model", "request": {**MODEL, "device_id": "no-such-device"}},
        {"analysis": "kv-capacity", "request": {"device_id": "nvidia-h100-sxm", "model_id": "llama-3.1-8b",
                                                "context_len": 4096}},
    ]
    response = client.post("/v1/analyze/batch", json={"items": items})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["id"] for r in results] == ["gemv", "decode", "typo", "nowhere", None]
    assert [r["status"] for r in results] == [200, 200, 422, 404, 200]
    assert results[0]["result"] == client.post("/v1/analyze/operator", json=OPERATOR).json()
    assert results[1]["result"] == client.post("/v1/analyze/model", json=MODEL).json()
    assert results[2]["error"]["fields"][0]["loc"] == "body.items.2.request.operator.m"
    assert results[3]["error"]["error"] == "device_not_found"
    assert results[4]["result"]["max_concurrent_requests"] > 0


def test_a_batch_over_its_work_budget_is_refused_before_any_item_runs(client):
    sweep = {"endpoint": "operator", "request": OPERATOR, "parameter": "operator.m",
             "range": {"start": 1, "stop": 4096, "step": 1}}
    items = [{"analysis": "sweep", "request": sweep}] * 5  # 5 x 4,096 points = 20,480 units, over 20,000
    refused = client.post("/v1/analyze/batch", json={"items": items})
    assert refused.status_code == 422 and refused.json()["fields"][0]["loc"] == "body.items"
    assert client.post("/v1/analyze/batch", json={"items": [{"analysis": "operator", "request": OPERATOR}] * 1001}
                       ).status_code == 422


def test_a_long_batch_streams_every_result_in_order_across_its_pieces(client, monkeypatch):
    """The answer is sent in pieces of about PIECE_BYTES; items over several pieces, one of which hits a defect (an
    exception no analysis should raise, whether the matmul is answered alone or with its group), come back whole, in
    order, that one as its own 500."""
    from service.translation import analyses
    from service.translation.operators import analyses as operator_analyses
    from service.translation.operators import matmul_batches

    real, real_in_bulk = operator_analyses.operator_analysis_fields, matmul_batches.MatmulAnswers.answer

    def defect_at_m_7(request, *rest):
        if request.operator.m == 7:
            raise RuntimeError("a defect")
        return real(request, *rest)

    def defect_at_index_6(self, index):
        if index == 6:
            raise RuntimeError("a defect")
        return real_in_bulk(self, index)

    monkeypatch.setattr(operator_analyses, "operator_analysis_fields", defect_at_m_7)
    monkeypatch.setattr(matmul_batches.MatmulAnswers, "answer", defect_at_index_6)
    monkeypatch.setattr(analyses, "PIECE_BYTES", 20_000)  # about ten answers a piece
    count = 125
    items = [{"id": f"m{m}", "analysis": "operator",
              "request": {**OPERATOR, "operator": {"kind": "matmul", "m": m, "n": 4096, "k": 4096}}}
             for m in range(1, count + 1)]
    response = client.post("/v1/analyze/batch", json={"items": items})
    assert response.status_code == 200 and "content-length" not in response.headers  # streamed
    results = response.json()["results"]
    assert [r["id"] for r in results] == [f"m{m}" for m in range(1, count + 1)]
    assert [r["status"] for r in results].count(200) == count - 1
    assert results[6]["status"] == 500 and results[6]["error"]["error"] == "internal_error"
    # A GEMV-like m x 4096 x 4096 matmul: 2 m 4096^2 FLOPs, whichever piece it was answered in.
    assert [r["result"]["flops"] for r in results if r["status"] == 200] == [
        2.0 * m * 4096 * 4096 for m in range(1, count + 1) if m != 7]


def test_a_large_batch_is_validated_off_the_event_loop(client, monkeypatch):
    """Validating a 1,000-item body takes milliseconds (10 to 30 on this machine): it runs in the thread pool, not on
    the event loop that answers /healthz; a small body is validated inline. A bad item still gets its own error."""
    import asyncio

    from schemas.batch import TypedBatchRequest
    from service.api.lean_route import OFF_LOOP_BYTES

    on_loop = []
    real = TypedBatchRequest.model_validate_json.__func__

    def recording(cls, raw, *rest, **options):
        try:
            asyncio.get_running_loop()
            on_loop.append((len(raw), True))
        except RuntimeError:
            on_loop.append((len(raw), False))
        return real(cls, raw, *rest, **options)

    monkeypatch.setattr(TypedBatchRequest, "model_validate_json", classmethod(recording))
    item = {"analysis": "operator", "request": OPERATOR}
    large = {"items": [{**item, "id": f"i{i}"} for i in range(1000)]}
    large["items"][3] = {"id": "bad", "analysis": "operator", "request": {**OPERATOR, "device_id": "NOT VALID"}}
    response = client.post("/v1/analyze/batch", json=large)
    assert response.status_code == 200
    results = response.json()["results"]
    assert results[3]["status"] == 422 and [r["status"] for r in results].count(200) == 999
    assert client.post("/v1/analyze/batch", json={"items": [item]}).status_code == 200
    (large_size, large_on_loop), (small_size, small_on_loop) = on_loop
    assert large_size >= OFF_LOOP_BYTES and not large_on_loop
    assert small_size < OFF_LOOP_BYTES and small_on_loop
