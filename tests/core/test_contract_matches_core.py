"""The HTTP contract and the core must know the same dtypes and operator kinds."""

import typing

from schemas.common import DTypeName, IndexDTypeName
from schemas.operators import OPERATOR_KINDS
from service.core.dtypes import BYTES_PER_ELEMENT
from service.core.operators import OPERATORS


def test_dtypes_agree():
    assert set(typing.get_args(DTypeName)) | set(typing.get_args(IndexDTypeName)) == set(BYTES_PER_ELEMENT)


def test_operator_kinds_agree():
    assert OPERATOR_KINDS == tuple(OPERATORS)
