"""json_bytes writes answers with orjson where pydantic-core's to_json wrote them before: for every value an
answer holds, the bytes must be the same (clients and tests/api/test_answer_json.py compare bytes)."""

import math
import random
import struct

import numpy as np
import pytest
from pydantic_core import to_json

from service.core.roofs import RoofSource
from service.translation.plain_fields import json_bytes

pytestmark = pytest.mark.dialect_free


def test_floats_of_every_magnitude_are_written_as_pydantic_core_writes_them():
    rng = random.Random(11)
    # Decimal magnitudes from 1e-40 to 1e40 (both notations and the switch between them), and uniformly random
    # bit patterns (subnormals and the largest doubles included).
    values = [rng.uniform(-1, 1) * 10 ** rng.uniform(-40, 40) for _ in range(20_000)]
    values += [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(20_000)]
    values = [v for v in values if math.isfinite(v)]
    values += [0.0, -0.0, 1.0, 1e15, 1e16, 1e17, 1e-5, 1e-6, 1e-7, 2.0**53, 5e-324, 1.7976931348623157e308]
    assert json_bytes(values) == to_json(values)
    mismatched = [v for v in values[:2000] if json_bytes(v) != to_json(v)]
    assert mismatched == []


def test_strings_ints_enums_and_nesting_are_written_alike():
    value = {"name": "attn_norm é 中 \u2028 \x00 \x1f \"\\ </script>", "count": 2**63 - 1, "negative": -(2**63),
             "none": None, "flag": True, "source": RoofSource.measured, "tile": (128, 128, 64),
             "rows": [{"bytes": 1.5, "bound": "memory"}], "empty": {}}
    assert json_bytes(value) == to_json(value)


def test_what_orjson_refuses_is_written_by_pydantic_core():
    huge = {"count": 2**70}  # past 64 bits: orjson refuses it
    assert json_bytes(huge) == to_json(huge) == b'{"count":1180591620717411303424}'


def test_numpy_arrays_are_written_as_their_python_numbers():
    """The batch's matmuls write a group's numbers from float64 and int64 arrays (json_bytes(..., numpy=True))."""
    rng = random.Random(12)
    floats = [rng.uniform(-1, 1) * 10 ** rng.uniform(-40, 40) for _ in range(5_000)] + [0.0, 1.0, 1e16, 2.0**53]
    matrix = np.array(floats).reshape(-1, 4)
    assert json_bytes(matrix, numpy=True) == to_json(matrix.tolist())
    counts = np.array([rng.randint(-(2**62), 2**62) for _ in range(1_000)], dtype=np.int64)
    assert json_bytes(counts, numpy=True) == to_json(counts.tolist())
