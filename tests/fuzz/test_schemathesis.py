"""Schema fuzzing against the service's own OpenAPI document (fixed seed, bounded examples per operation),
with a valid writer token so the write routes are exercised too: no 5xx, only documented status codes,
responses conform to their documented schemas, and every 4xx has the service's error shape.

Three runs: positive cases (valid by the schema), negative cases (invalid by it: the service must refuse
them with a documented 4xx, never a 5xx), and a stateful run that chains operations through the links
schemathesis infers (create a device, then read, replace, restore, benchmark and delete it)."""

import itertools
import json
import os

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.generation import GenerationMode

from service.main import create_app
from service.runtime.config import Settings
from tests.conftest import AUTH, TOKEN, fresh_database

EXAMPLES_PER_OPERATION = 30
# A body valid by the document may be refused by request validation only for a rule JSON Schema cannot state
# (a sum, uniqueness by a key, membership in another field, a date range); each is said in the document's words.
UNSTATABLE_RULES = {
    "context_mix: the shares must sum to 1": "shares sum to 1",
    "names devices that are not candidates": "each id one of device_ids",
    "memory_levels: each level may appear once": "Each level once",
    "compute_peaks: duplicate (dtype, unit)": "one per (dtype, unit)",
    "must lie between 1970-01-01 and 2200-01-01": "1970 to 2200",
    "more than 4096 points": "at most 4096 points",
    "exceeds draft_tokens + 1": "between 1 and draft_tokens + 1",
    "each key head serves whole value heads": "must divide heads",
    "the weights must not all be 0": "weights not all 0",
    "a length exceeds": "none longer than",
}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def load_schema(modes):
    # The document needs no database: an app that is never started describes the API.
    loaded = schemathesis.openapi.from_dict(
        create_app(Settings(database_url="sqlite://", migrate_on_start=False)).openapi())
    loaded.config.generation.update(modes=modes)
    return loaded


positive = load_schema([GenerationMode.POSITIVE])
negative = load_schema([GenerationMode.NEGATIVE])
# Charts draw the analyses the other operations fuzz already, at a third of a second of matplotlib a valid body:
# their coverage phase (two hundred boundary bodies an operation, whatever max_examples says) is left to those.
charts = load_schema([GenerationMode.POSITIVE])
charts.config.phases.update(phases=["examples", "fuzzing"])
# Writes of up to 10,000 rows (or 1,000 serving runs): their coverage phase's boundary bodies (10,000 timings each,
# costed, stored and fitted, seconds apiece) are left out; the fuzzing phase still sends bodies of every size the schema allows.
bulk = load_schema([GenerationMode.POSITIVE])
bulk.config.phases.update(phases=["examples", "fuzzing"])
BULK = r"/kernel-timings$|^/v1/serving-runs$"
FUZZ_SETTINGS = hypothesis_settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True,
                                    database=None, suppress_health_check=list(HealthCheck))
# Charts: fewer examples, and on one dialect.
CHARTS = r"^/v1/plot/|/roofline\.svg$"
CHART_FUZZ_SETTINGS = hypothesis_settings(FUZZ_SETTINGS, max_examples=10)


def check(case, live_server):
    response = case.call_and_validate(base_url=live_server, headers=AUTH, checks=CHECKS)
    if 400 <= response.status_code < 500:
        assert set(response.json()) == {"error", "detail", "fields"}
    return response


def check_positive(case, live_server):
    response = check(case, live_server)
    if response.status_code == 422 and response.json()["error"] == "validation_error":
        detail = response.json()["detail"]
        assert any(rule in detail for rule in UNSTATABLE_RULES), f"a rule the document does not state: {detail}"


@positive.exclude(path_regex=CHARTS).exclude(path_regex=BULK, method="POST").parametrize()
@FUZZ_SETTINGS
def test_api_conforms_to_its_schema(case, live_server):
    check_positive(case, live_server)


@bulk.include(path_regex=BULK, method="POST").parametrize()
@CHART_FUZZ_SETTINGS
def test_bulk_writes_conform_to_their_schema(case, live_server):
    check_positive(case, live_server)


@pytest.mark.dialect_free
@charts.include(path_regex=CHARTS).parametrize()
@CHART_FUZZ_SETTINGS
def test_charts_conform_to_their_schema(case, live_server):
    check_positive(case, live_server)


def test_the_rules_json_schema_cannot_state_are_said_in_the_document():
    text = json.dumps(positive.raw_schema)
    assert [phrase for phrase in UNSTATABLE_RULES.values() if phrase not in text] == []


@negative.parametrize()
@FUZZ_SETTINGS
def test_requests_outside_the_schema_are_refused_with_documented_4xx(case, live_server):
    response = check(case, live_server)
    assert response.status_code < 500


def test_chained_operations_conform(migrated_template, tmp_path):
    """Each scenario runs against an app of its own on a fresh copy of the migrated database, so the same
    steps always meet the same responses (hypothesis requires generation that replays identically)."""
    machine = positive.as_state_machine()
    scenarios = itertools.count()

    class WithWriterToken(machine):
        def setup(self):
            self._url, self._drop = fresh_database(migrated_template, tmp_path / f"scenario-{next(scenarios)}.db")
            self._client = TestClient(create_app(Settings(database_url=self._url, api_tokens=f"tester={TOKEN}",
                                                          log_level="WARNING")))
            self._client.__enter__()

        def teardown(self):
            self._client.__exit__(None, None, None)
            self._drop()

        def get_call_kwargs(self, case):
            return {"app": self._client.app, "headers": AUTH}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs or None)
            if 400 <= response.status_code < 500:
                assert set(response.json()) == {"error", "detail", "fields"}

    WithWriterToken.run(settings=hypothesis_settings(max_examples=int(os.environ.get("STATEFUL_EXAMPLES", "30")),
                                                     stateful_step_count=6, deadline=None, derandomize=True,
                                                     database=None, suppress_health_check=list(HealthCheck)))
