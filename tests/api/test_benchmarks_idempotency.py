"""Idempotency-Key on writes: a retried write answers its first answer again, never writes twice (on SQLite and on
PostgreSQL: the key is claimed in the database before the write runs)."""

import hashlib

from sqlmodel import Session

from service.persistence import repository
from tests.conftest import AUTH

HBM = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3.0e12, "tool": "nvbandwidth"}
PATH = "/v1/devices/nvidia-h100-sxm/benchmarks"


def stored(client) -> int:
    return len(client.get(PATH).json())


def test_a_retry_with_the_same_key_answers_the_first_answer_and_writes_once(client):
    headers = {**AUTH, "Idempotency-Key": "retry-1"}
    first = client.post(PATH, json=HBM, headers=headers)
    again = client.post(PATH, json=HBM, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
    assert stored(client) == 1
    # Without a key, a second post is a second measurement.
    client.post(PATH, json=HBM, headers=AUTH)
    assert stored(client) == 2


def test_the_same_key_with_another_body_is_a_409(client):
    headers = {**AUTH, "Idempotency-Key": "retry-2"}
    assert client.post(PATH, json=HBM, headers=headers).status_code == 201
    other = client.post(PATH, json={**HBM, "bytes_per_s": 3.1e12}, headers=headers)
    assert other.status_code == 409 and other.json()["error"] == "idempotency_conflict"
    assert other.json()["fields"][0]["loc"] == "header.idempotency-key"
    assert stored(client) == 1


def test_an_interrupted_write_under_a_key_is_not_applied_again(client):
    # A claim with no answer: the first write's worker died mid-way, so whether it was applied is unknown.
    engine = client.app.state.engine
    client_hash = hashlib.sha256(AUTH["Authorization"].encode()).hexdigest()
    with Session(engine) as session:
        assert repository.claim_idempotency_key(session, client=client_hash, key="retry-3", fingerprint="x",
                                                    ttl_s=3600) is None
    response = client.post(PATH, json=HBM, headers={**AUTH, "Idempotency-Key": "retry-3"})
    assert response.status_code == 409 and stored(client) == 0


def test_a_refused_write_is_answered_again_too_and_keys_belong_to_their_client(client):
    headers = {**AUTH, "Idempotency-Key": "retry-4"}
    bad = {**HBM, "bytes_per_s": -1}
    first = client.post(PATH, json=bad, headers=headers)
    assert first.status_code == 422
    assert client.post(PATH, json=bad, headers=headers).json() == first.json()
    # Another client (no token: refused 401) does not see this client's key.
    assert client.post(PATH, json=bad, headers={"Idempotency-Key": "retry-4"}).status_code == 401


def keys(client) -> int:
    with Session(client.app.state.engine) as session:
        return repository.count_idempotency_keys(session)


def test_writes_without_a_writer_token_claim_no_key(client):
    # 8 clients without a token had grown the table by 4,910 rows (about 8 MB a minute): each 401 kept a key.
    for index in range(20):
        for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic abc"}):
            refused = client.post(PATH, json=HBM, headers={**headers, "Idempotency-Key": f"anon-{index}"})
            assert refused.status_code == 401
    assert keys(client) == 0 and stored(client) == 0
    assert client.post(PATH, json=HBM, headers={**AUTH, "Idempotency-Key": "real"}).status_code == 201
    assert keys(client) == 1


def test_a_key_expires_after_its_time_to_live(client):
    from datetime import timedelta

    from service.persistence.tables import IdempotencyKey

    headers = {**AUTH, "Idempotency-Key": "old"}
    assert client.post(PATH, json=HBM, headers=headers).status_code == 201
    with Session(client.app.state.engine) as session:  # claimed a day and a second ago
        row = session.get(IdempotencyKey, (hashlib.sha256(AUTH["Authorization"].encode()).hexdigest(), "old"))
        row.created_at = row.created_at - timedelta(seconds=client.app.state.settings.idempotency_ttl_s + 1)
        session.add(row)
        session.commit()
    # The same key is a new write now (its old claim deleted by the next claim), answered as a first write.
    again = client.post(PATH, json=HBM, headers=headers)
    assert again.status_code == 201 and "idempotent-replayed" not in again.headers
    assert stored(client) == 2 and keys(client) == 1
