"""Error answers mean one thing each: their status, code and location, and the document lists only
the codes an operation can return."""

import typing

from schemas.common import ErrorCode
from service.runtime import errors

OPERATOR = {"device_id": "nvidia-h100-sxm", "operator": {"kind": "matmul", "m": 1, "n": 4096, "k": 4096}}


def test_malformed_json_is_a_400_at_the_body_not_a_field(client):
    response = client.post("/v1/analyze/operator", content='{"device_id": "nvidia-h100-sxm", "operator": {',
                           headers={"content-type": "application/json"})
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "malformed_json" and body["fields"] == [{"loc": "body", "msg": body["fields"][0]["msg"]}]
    assert "character 46" in body["detail"]
    # The same on a route served by FastAPI's own handler.
    assert client.post("/v1/devices", content="{", headers={"content-type": "application/json"}).status_code in (400, 401)


def test_a_body_that_is_not_json_is_a_415(client):
    for content_type, payload in (("text/plain", '{"device_id": "x"}'), ("application/x-www-form-urlencoded", "a=1")):
        response = client.post("/v1/analyze/operator", content=payload, headers={"content-type": content_type})
        assert response.status_code == 415, content_type
        assert response.json()["error"] == "unsupported_media_type"
        assert response.json()["fields"][0]["loc"] == "header.content-type"


def test_a_typo_in_a_sweep_parameter_is_reported_at_the_parameter(client):
    response = client.post("/v1/analyze/sweep", json={"endpoint": "operator", "request": OPERATOR,
                                                      "parameter": "operator.mm", "values": [1, 2]})
    assert response.status_code == 422
    assert response.json()["fields"] == [{"loc": "body.parameter", "msg": "'mm' is not a field of matmul"}]


def test_operations_document_only_the_errors_they_can_return(client):
    paths = client.get("/openapi.json").json()["paths"]
    # The probes are never charged to an anonymous budget (no 429); readiness answers 503 when it cannot serve.
    assert set(paths["/healthz"]["get"]["responses"]) == {"200"}
    assert set(paths["/readyz"]["get"]["responses"]) == {"200", "503"}
    assert set(paths["/v1/conventions"]["get"]["responses"]) == {"200", "429"}
    # No body, no parameters: nothing to be malformed or invalid, but the database may be busy.
    assert set(paths["/v1/devices"]["get"]["responses"]) == {"200", "429", "503"}
    assert set(paths["/v1/analyze/operator"]["post"]["responses"]) == {"200", "400", "404", "413", "415", "422", "429",
                                                                       "503"}
    # /v1/conventions is listed once, under one tag.
    assert paths["/v1/conventions"]["get"]["tags"] == ["conventions"]


def test_every_error_code_the_service_raises_is_enumerated_in_the_schema(client):
    codes = set(typing.get_args(ErrorCode))
    raised = {cls.code for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.ServiceError)}
    assert raised <= codes
    schema = client.get("/openapi.json").json()["components"]["schemas"]["ErrorResponse"]["properties"]["error"]
    assert set(schema["enum"]) == codes


def test_large_answers_are_compressed_for_clients_that_accept_it(client):
    sweep = {"endpoint": "operator", "request": OPERATOR, "parameter": "operator.m",
             "range": {"start": 1, "stop": 4096, "step": 1}}
    compressed = client.post("/v1/analyze/sweep", json=sweep, headers={"accept-encoding": "gzip"})
    assert compressed.status_code == 200 and compressed.headers["content-encoding"] == "gzip"
    assert len(compressed.json()["rows"]) == 4096
    plain = client.post("/v1/analyze/sweep", json=sweep, headers={"accept-encoding": "identity"})
    assert "content-encoding" not in plain.headers
    # A single operator answer is small: sent as it is.
    small = client.post("/v1/analyze/operator", json=OPERATOR, headers={"accept-encoding": "gzip"})
    assert "content-encoding" not in small.headers


def test_method_errors_name_every_allowed_method_and_the_ert_path_is_not_a_benchmark_id(client):
    from tests.conftest import AUTH

    # /v1/devices/{id} is served by three routes (GET, PUT, DELETE): a PATCH is told all of them.
    response = client.patch("/v1/devices/nvidia-h100-sxm", json={})
    assert response.status_code == 405 and response.headers["allow"] == "DELETE, GET, PUT"
    # .../benchmarks/ert takes a POST only: a DELETE is a 405 naming it, not a 422 about an integer id.
    response = client.delete("/v1/devices/nvidia-h100-sxm/benchmarks/ert", headers=AUTH)
    assert response.status_code == 405 and response.headers["allow"] == "POST"


def test_a_measurement_time_given_as_a_number_is_refused(client):
    from tests.conftest import AUTH

    body = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3.0e12, "tool": "t", "measured_at": 0}
    response = client.post("/v1/devices/nvidia-h100-sxm/benchmarks", json=body, headers=AUTH)
    assert response.status_code == 422 and "ISO 8601" in response.text
    assert response.json()["fields"][0]["loc"].endswith("measured_at")


def test_no_redirect_echoes_the_host_a_client_sent(client):
    response = client.get("/v1/devices/", headers={"Host": "evil.example", "X-Forwarded-Proto": "gopher"},
                          follow_redirects=False)
    assert response.status_code == 404 and "location" not in response.headers
