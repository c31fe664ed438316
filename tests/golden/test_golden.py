"""Every recorded request answers the same bytes as when its hash was recorded (tests/golden/record.py)."""

import json

import pytest

from tests.golden.record import ANSWERS, answer_hashes, build_requests, load_requests

pytestmark = pytest.mark.dialect_free


def test_the_recorded_requests_are_the_ones_the_recorder_builds():
    # A change to the recorder without re-recording would leave the hashes checking a set nobody chose.
    assert load_requests() == json.loads(json.dumps(build_requests()))


def test_every_golden_answer_is_unchanged():
    recorded = json.loads(ANSWERS.read_text())
    answers = answer_hashes(load_requests())
    assert answers.keys() == recorded.keys()
    changed = sorted(key for key in recorded if answers[key] != recorded[key])
    requests = {request["id"]: request for request in load_requests()}
    assert not changed, (f"{len(changed)} of {len(recorded)} golden answers changed, e.g. "
                         f"{[(key, requests[key]['path'], requests[key]['body']) for key in changed[:3]]}")


def test_the_golden_set_covers_successes_and_refusals():
    statuses = [answer["status"] for answer in json.loads(ANSWERS.read_text()).values()]
    assert statuses.count(200) >= 450
    assert {404, 422} <= set(statuses)
