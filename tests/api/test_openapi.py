"""The OpenAPI document: valid, documented, with examples, and pages that load nothing from outside."""

import re

from openapi_spec_validator import validate


def test_openapi_document_validates(client):
    validate(client.get("/openapi.json").json())


def test_every_operation_is_documented(client):
    spec = client.get("/openapi.json").json()
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            where = f"{method.upper()} {path}"
            assert operation.get("summary") and operation.get("description") and operation.get("tags"), where
            assert operation.get("operationId"), where
            for status, response in operation["responses"].items():
                if status.startswith("4"):
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/ErrorResponse"}, (where, status)
            if "requestBody" in operation:
                content = operation["requestBody"]["content"]
                # Every body is JSON, bar the CSV form of the kernel-timings write.
                assert list(content) in (["application/json"], ["text/csv"]), where
                body = content.get("application/json") or content["text/csv"]
                schema = body["schema"]
                has_example = "examples" in body or "example" in body
                if not has_example and "$ref" in schema:
                    name = schema["$ref"].rsplit("/", 1)[1]
                    has_example = bool(spec["components"]["schemas"][name].get("examples"))
                assert has_example, f"{where} has no request example"


def test_model_endpoints_carry_several_examples(client):
    spec = client.get("/openapi.json").json()
    for path in ("/v1/analyze/model", "/v1/analyze/kv-capacity"):
        examples = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["examples"]
        assert len(examples) >= 2


def test_docs_pages_reference_nothing_outside_the_service(client):
    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        assert not re.search(r"(src|href)=[\"']https?://", html), page
        for asset in re.findall(r"(?:src|href)=[\"'](/[^\"']+)[\"']", html):
            assert client.get(asset).status_code == 200, asset
    assert client.get("/static-offline-docs/swagger-ui-bundle.js").status_code == 200


def test_conventions_endpoint(client):
    body = client.get("/v1/conventions").json()
    assert body["bytes_per_element"]["bf16"] == 2 and body["bytes_per_element"]["int4"] == 0.5
    assert body["flops_per_element"]["silu"] == 4 and body["flops_per_element"]["embedding"] == 0
    assert body["compute_unit_by_kind"]["matmul"] == "tensor" and body["compute_unit_by_kind"]["softmax"] == "vector"


UNIT_WORDS = {r"_bytes$": "bytes", r"(?<!per)_s$": "second", r"_bytes_per_s$": "bytes/s",
              r"(^|_)flops_per_s$": "FLOP/s", r"_hz$": "Hz", r"_w$": " W"}


def test_every_schema_property_says_what_it_is_with_its_unit(client):
    import re

    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    undescribed = [f"{name}.{prop}" for name, schema in schemas.items()
                   for prop, body in (schema.get("properties") or {}).items() if not body.get("description")]
    assert undescribed == []
    # A field whose name carries a unit names it in its description too.
    unitless = [f"{name}.{prop}" for name, schema in schemas.items() for prop, body in (schema.get("properties") or {}).items()
                for pattern, word in UNIT_WORDS.items() if re.search(pattern, prop) and word not in body["description"]]
    assert unitless == []


def test_the_root_sends_people_to_the_docs_and_the_explorer(client):
    response = client.get("/")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    for link in ('href="docs"', 'href="explore"', 'href="openapi.json"'):
        assert link in response.text
    assert "/" not in client.get("/openapi.json").json()["paths"]  # a page for people, not an API operation
