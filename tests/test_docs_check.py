"""The documentation check holds printed figures to the page's (scripts/check_docs_cli.py): the two drifts that
went unseen while CI only ran each command, a '-' where 11.3 ms printed and a plan 22 % off, are caught; a figure
within 5 % and an abridged table are not drift."""

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("check_docs_cli", Path(__file__).parents[1] / "scripts" / "check_docs_cli.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)

pytestmark = pytest.mark.dialect_free

ROW = "2     nvidia-h100-sxm       9.74 ms     {}   memory  0.057  3,286     1.58x"


def test_a_missing_figure_and_a_stale_one_are_drift():
    assert check.drift([ROW.format("-      ")], [ROW.format("11.3 ms")])
    assert check.drift(["aggregated  b200  8  126  203 ms  4,203"], ["aggregated  b200  8  153  180 ms  5,106"])


def test_figures_within_the_tolerance_and_padding_are_not():
    assert not check.drift(["tokens/s 3,286 at 9.74 ms"], ["tokens/s   3,300  at 9.8ms"])
    assert check.drift(["tokens/s 3,286"], ["tokens/s 3,500"])  # 6.5 % off


def test_an_abridged_table_skips_rows_in_order():
    printed = ["header", "embedding 1", "qkv_proj 2", "rope 3", "attention 4", "total 10"]
    assert not check.drift(["header", "...", "qkv_proj 2", "attention 4", "total 10"], printed)
    assert check.drift(["header", "...", "attention 4", "qkv_proj 2"], printed)  # out of order
    assert check.drift(["header", "embedding 1", "qkv_proj 2"], ["header", "embedding 1"])  # a line missing
