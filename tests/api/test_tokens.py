"""Writer tokens of every common shape work as given; a configuration that cannot be read stops the start."""

import base64
import hashlib

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.main import create_app
from service.runtime.config import Settings, parse_tokens

MEASUREMENT = {"kind": "memory_bandwidth", "level": "hbm", "bytes_per_s": 3.0e12, "tool": "nvbandwidth"}


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


# `openssl rand -base64 16` prints 24 characters ending in "==".
PADDED = base64.b64encode(bytes(range(16))).decode()


@pytest.mark.parametrize("configured, token, label", [
    (PADDED, PADDED, "token-1"),                          # bare base64 with '==' padding: all of it is the token
    (base64.b64encode(b"abcd").decode(), "YWJjZA==", "token-1"),
    (base64.b64encode(b"abcde").decode(), "YWJjZGU=", "token-1"),  # one '=' of padding
    (f"ops:{PADDED}", PADDED, "ops"),
    (f"ops={PADDED}", PADDED, "ops"),                    # the legacy form, padding kept
    ("ops = s3cret-t0ken", "s3cret-t0ken", "ops"),                  # spaces around the parts are not part of them
    ("ci:" + "9f" * 16, "9f" * 16, "ci"),                  # hex
    ("ci:" + base64.urlsafe_b64encode(bytes(range(200, 216))).decode(), None, "ci"),
])
def test_tokens_of_every_common_shape_work_as_given(configured, token, label):
    tokens = parse_tokens(configured)
    token = token or configured.split(":", 1)[1]
    assert tokens == {digest(token): label}


def test_only_hashes_are_kept_and_labels_never_come_from_secrets():
    tokens = Settings(api_tokens=f"{PADDED}, ops:other-secret").writer_tokens()
    assert set(tokens.values()) == {"token-1", "ops"}
    assert all(isinstance(key, bytes) and len(key) == 32 for key in tokens)


@pytest.mark.parametrize("configured, reason", [
    ("ops:", "at least 8 characters"),            # a label whose token was left out
    ("ops=", "at least 8 characters"),            # read as a bare 4-character token: too short to be a secret
    (":secret-secret", "the label ''"),
    ("bad label:secret-secret", "the label 'bad label'"),
    ("a:secret-one,a:secret-two", "used twice"),
    ("a:secret-one,b:secret-one", "listed twice"),
    ("ops:secret with-space", "no spaces"),
])
def test_a_configuration_that_cannot_be_read_stops_the_start(configured, reason):
    with pytest.raises(ValidationError) as refused:
        Settings(api_tokens=configured)
    assert "ROOFLINE_API_TOKENS" in str(refused.value) and reason in str(refused.value)


def test_a_padded_base64_token_writes_and_is_recorded_by_its_label(database_url):
    settings = Settings(database_url=database_url, api_tokens=PADDED)
    with TestClient(create_app(settings)) as client:
        url = "/v1/devices/nvidia-h100-sxm/benchmarks"
        # The secret minus its padding, or the padding alone, is not the secret.
        for wrong in ("=", PADDED.rstrip("=")):
            assert client.post(url, json=MEASUREMENT, headers={"Authorization": f"Bearer {wrong}"}).status_code == 401
        written = client.post(url, json=MEASUREMENT, headers={"Authorization": f"Bearer {PADDED}"})
        assert written.status_code == 201
        assert written.json()["submitted_by"] == "token-1"
        assert PADDED.rstrip("=") not in client.get(url).text
