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


def test_the_document_is_served_as_serialised_once_and_revalidated_by_its_etag(client):
    import json

    plain = client.get("/openapi.json", headers={"Accept-Encoding": "identity"})
    assert plain.status_code == 200 and plain.headers["content-type"] == "application/json"
    assert plain.json() == client.app.openapi()  # the document FastAPI builds, byte for byte its JSON
    assert plain.content == json.dumps(client.app.openapi(), ensure_ascii=False, separators=(",", ":")).encode()
    etag = plain.headers["etag"]
    assert plain.headers["cache-control"] == "no-cache"  # always revalidated: a new version is seen at once

    # The compressed form is the same document (httpx undoes the gzip the header names).
    compressed = client.get("/openapi.json", headers={"Accept-Encoding": "gzip"})
    assert compressed.headers["content-encoding"] == "gzip" and compressed.headers["etag"] == etag
    assert int(compressed.headers["content-length"]) < len(plain.content) / 4
    assert compressed.content == plain.content

    # A browser holding it asks again with its ETag and gets a 304 with no body.
    again = client.get("/openapi.json", headers={"If-None-Match": etag})
    assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag
    other = client.get("/openapi.json", headers={"If-None-Match": '"something-else"'})
    assert other.status_code == 200 and other.json() == plain.json()


def test_each_form_page_carries_its_requests_part_of_the_document(client):
    """The explorer's form pages build their forms from their requests' schemas, which the page itself carries (cut
    from the OpenAPI document: the named schemas and every one they refer to), so the first request goes out without
    the 400 KB document."""
    import json

    from service.api.routes.explorer import PAGES

    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    for page in (p for p in PAGES if p.forms):
        html = client.get(f"/explore/{page.name}").text
        found = re.search(r'<script type="application/json" id="request-schemas">(.*?)</script>', html, re.S)
        assert found, page.name
        carried = json.loads(found.group(1))["components"]["schemas"]
        assert set(page.forms) <= set(carried)
        for name, schema in carried.items():
            assert schema == schemas[name], (page.name, name)  # as the document has it
            for ref in re.findall(r'"\$ref":\s*"#/components/schemas/([^"]+)"', json.dumps(schema)):
                assert ref in carried, (page.name, name, ref)  # nothing it refers to is left behind
        assert len(found.group(1)) < len(json.dumps(document)) / 10
    assert 'id="request-schemas"' not in client.get("/explore").text  # the model-step view has no such form
