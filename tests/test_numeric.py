import ast
import dataclasses
import decimal
import doctest
import fractions
import sys
from pathlib import Path

import numpy as np
import pytest

from corral import numeric
from corral.numeric import (
    Aggregate,
    MissingValueError,
    NumericError,
    maximum,
    mean,
    median,
    minimum,
    to_number,
    total,
)

NORTHSTAR = [9, None, 7.5]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (9, 9.0),
        (7.5, 7.5),
        ("9", 9.0),
        ("7.5", 7.5),
        ("1e-1", 0.1),
        (" 7.5\n", 7.5),
        ("-3", -3.0),
        ("+.5", 0.5),
        ("2.", 2.0),
        ("1E3", 1000.0),
        (decimal.Decimal("2.5"), 2.5),
        (fractions.Fraction(1, 4), 0.25),
        (np.int64(3), 3.0),
        (np.float32(0.5), 0.5),
    ],
)
def test_to_number_accepts_finite_numbers_and_numeric_strings(
    value: object, expected: float
) -> None:
    result = to_number(value)
    assert result == expected
    assert type(result) is float


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        True,
        False,
        None,
        "abc",
        "9 h",
        "1,000",
        "1_000",
        "0x10",
        "nan",
        "inf",
        "-Infinity",
        "1e400",
        "\u0661\u0662",
        float("inf"),
        float("-inf"),
        float("nan"),
        decimal.Decimal("NaN"),
        10**400,
        b"9",
        [9],
    ],
)
def test_to_number_rejects_what_is_not_a_finite_number(value: object) -> None:
    with pytest.raises(NumericError):
        to_number(value)


def test_numeric_error_is_a_value_error_with_a_clear_message() -> None:
    with pytest.raises(ValueError, match="empty string"):
        to_number("")
    with pytest.raises(NumericError, match="not finite"):
        to_number(float("inf"))
    with pytest.raises(NumericError, match="'abc' is not a numeric string"):
        to_number("abc")


def test_reject_names_the_gap() -> None:
    with pytest.raises(MissingValueError, match="index 1") as caught:
        mean(NORTHSTAR)
    assert caught.value.indices == (1,)
    assert isinstance(caught.value, NumericError)


def test_omit_uses_observed_values_and_discloses_n() -> None:
    result = mean(NORTHSTAR, missing="omit")
    assert result == Aggregate("mean", 8.25, n=2, n_missing=1, policy="omit")
    assert result.value != 5.5  # what reading the gap as 0 would invent


def test_propagate_makes_the_result_missing() -> None:
    result = mean(NORTHSTAR, missing="propagate")
    assert result.value is None
    assert result.is_missing
    assert (result.n, result.n_missing, result.policy) == (2, 1, "propagate")


def test_the_northstar_mean_has_denominator_two() -> None:
    result = mean([9, 7.5])
    assert (result.value, result.n, result.n_missing) == (8.25, 2, 0)
    assert not result.is_missing


def test_nan_and_pandas_na_count_as_missing() -> None:
    pd = pytest.importorskip("pandas")
    assert mean([9, float("nan"), 7.5], missing="omit").n_missing == 1
    assert mean([9, np.float32("nan"), 7.5], missing="omit").value == 8.25
    assert mean([9, pd.NA, 7.5], missing="omit").value == 8.25
    with pytest.raises(MissingValueError, match="index 0"):
        mean([pd.NA, 1])


def test_numeric_strings_go_through_to_number() -> None:
    assert mean(["9", " 7.5 "]).value == 8.25


def test_an_empty_string_is_not_missing_but_rejected_with_its_index() -> None:
    with pytest.raises(NumericError, match="index 1: an empty string") as caught:
        mean([9, "", 7.5], missing="omit")
    assert not isinstance(caught.value, MissingValueError)


def test_booleans_are_rejected_not_counted() -> None:
    with pytest.raises(NumericError, match="index 0"):
        total([True, 2])


def test_empty_input_is_an_error_under_every_policy() -> None:
    for policy in ("reject", "omit", "propagate"):
        with pytest.raises(NumericError, match="no observed values"):
            mean([], missing=policy)


def test_nothing_left_after_omission_is_an_error() -> None:
    with pytest.raises(NumericError, match="after omitting 2 missing"):
        mean([None, None], missing="omit")
    assert mean([None, None], missing="propagate").value is None


def test_many_gaps_are_counted_exactly_and_listed_briefly() -> None:
    with pytest.raises(MissingValueError, match="12 missing value") as caught:
        total([*([None] * 12), 1])
    assert caught.value.indices == tuple(range(12))
    assert "and 2 more" in str(caught.value)


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(NumericError, match="missing must be"):
        mean([1], missing="zero")  # type: ignore[arg-type]


def test_a_single_string_is_not_a_collection_of_values() -> None:
    with pytest.raises(NumericError, match="not one string"):
        mean("975")


def test_total_median_minimum_maximum() -> None:
    assert total([9, None, 7.5], missing="omit").value == 16.5
    assert total([0.1] * 10).value == 1.0
    assert median([3, 1, 2]).value == 2.0
    assert median([4, 1, 3, 2]).value == 2.5
    assert median([9, None, 7.5], missing="omit").value == 8.25
    assert minimum(["9", 7.5]).value == 7.5
    assert maximum(x for x in [9, 7.5]).value == 9.0
    assert maximum([9, None], missing="propagate").statistic == "maximum"


def test_sum_exists_but_stays_out_of_star_imports() -> None:
    assert numeric.sum is total
    assert numeric.sum([9, 7.5]).value == 16.5
    assert "sum" not in numeric.__all__


def test_aggregate_is_frozen() -> None:
    result = mean([1, 2])
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.value = 0.0  # type: ignore[misc]


def test_all_is_sorted_and_complete() -> None:
    assert numeric.__all__ == sorted(numeric.__all__)
    for name in numeric.__all__:
        assert hasattr(numeric, name)


def test_module_docstring_example_runs() -> None:
    failures, tried = doctest.testmod(numeric)
    assert (failures, tried) == (0, 1)


def test_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(numeric.__file__).read_text())
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            roots.add((node.module or "").split(".")[0])
    assert roots
    assert roots <= set(sys.stdlib_module_names) | {"__future__"}
