"""Schema fuzzing against the service's own OpenAPI document (fixed seed, bounded examples per operation):
no 5xx, responses conform to their documented schemas, and every 4xx has the service's error shape."""

import schemathesis
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import (
    content_type_conformance, not_a_server_error, response_schema_conformance, status_code_conformance,
)

from service.runtime.config import Settings
from service.main import create_app
from tests.conftest import AUTH

EXAMPLES_PER_OPERATION = 30

# The document needs no database: an app that is never started describes the API.
schema = schemathesis.openapi.from_dict(
    create_app(Settings(database_url="sqlite://", migrate_on_start=False)).openapi())


@schema.parametrize()
@hypothesis_settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
                     suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case, live_server):
    response = case.call_and_validate(
        base_url=live_server, headers=AUTH,
        checks=[not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance])
    if 400 <= response.status_code < 500:
        assert set(response.json()) == {"error", "detail", "fields"}
