"""Deliberate number normalisation and missing-aware aggregates (docs/code-interpreter.md §9).

Importable inside the sandbox: standard library only, no other corral module. Missing data
stays missing: a mean over ``[9, None, 7.5]`` must say how the gap was handled, never read it
as 0. Every aggregate takes ``missing=``:

* ``"reject"`` (default): a missing value raises :class:`MissingValueError` naming its index;
* ``"omit"``: compute over the observed values and disclose ``n`` and ``n_missing``;
* ``"propagate"``: any missing value makes the result missing (``value is None``).

What counts as missing: ``None``, a float NaN (how pandas and numpy mark absent cells) and
``pandas.NA``. Everything else must be a number, or a string that :func:`to_number` accepts;
an empty string is *not* missing (map absent cells to ``None`` first, on purpose).

>>> mean([9, None, 7.5], missing="omit")
Aggregate(statistic='mean', value=8.25, n=2, n_missing=1, policy='omit')
"""

from __future__ import annotations

import decimal
import math
import numbers
import re
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Aggregate",
    "MissingPolicy",
    "MissingValueError",
    "NumericError",
    "maximum",
    "mean",
    "median",
    "minimum",
    "to_number",
    "total",
]

MissingPolicy = Literal["reject", "omit", "propagate"]

_POLICIES: frozenset[str] = frozenset({"reject", "omit", "propagate"})
# ASCII digits only: float() would also take "1_000", "nan", "inf" and non-Latin digits.
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
# Error messages list at most this many gap positions; the count is always exact.
_MAX_LISTED = 10


class NumericError(ValueError):
    """A value is not a finite number, or an aggregate has nothing to work on."""


class MissingValueError(NumericError):
    """A value is missing and the policy is ``"reject"``.

    Attributes:
        indices: positions of every missing value, in order.
    """

    def __init__(self, statistic: str, indices: Sequence[int]) -> None:
        listed = ", ".join(str(i) for i in indices[:_MAX_LISTED])
        more = f" and {len(indices) - _MAX_LISTED} more" if len(indices) > _MAX_LISTED else ""
        super().__init__(
            f"{statistic}: {len(indices)} missing value(s) at index {listed}{more}; "
            'choose missing="omit" to use the observed values or "propagate" for a missing '
            "result"
        )
        self.indices: tuple[int, ...] = tuple(indices)


@dataclass(frozen=True, slots=True)
class Aggregate:
    """The result of an aggregate, with the facts needed to judge it.

    Attributes:
        statistic: ``"mean"``, ``"total"``, ``"median"``, ``"minimum"`` or ``"maximum"``.
        value: the result, or None when a missing value was propagated.
        n: how many observed (non-missing) values went into ``value``.
        n_missing: how many values were missing.
        policy: the missing-value policy that was applied.
    """

    statistic: str
    value: float | None
    n: int
    n_missing: int
    policy: MissingPolicy

    @property
    def is_missing(self) -> bool:
        """Whether the result itself is missing (a propagated gap)."""
        return self.value is None


def to_number(value: object) -> float:
    """Normalise one value to a finite float, deliberately.

    Args:
        value: an int, a finite float (or other real number) or a finite numeric string
            such as ``"9"``, ``"7.5"``, ``" 1e-1 "``; surrounding whitespace is ignored.

    Returns:
        The value as a float.

    Raises:
        NumericError: for booleans, None, empty or malformed strings, infinities, NaN, and
            anything that is not a number.
    """
    if isinstance(value, bool) or value is None:
        raise NumericError(f"{value!r} is not a number")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise NumericError("an empty string is not a number")
        if not _NUMBER.fullmatch(text):
            raise NumericError(f"{_clip(value)} is not a numeric string")
        number = float(text)
    elif isinstance(value, numbers.Real | decimal.Decimal):
        try:
            number = float(value)
        except (OverflowError, ValueError) as exc:
            raise NumericError(f"{_clip(value)} does not fit a float") from exc
    else:
        raise NumericError(f"a {type(value).__name__} is not a number")
    if not math.isfinite(number):
        raise NumericError(f"{_clip(value)} is not finite")
    return number


def mean(values: Iterable[object], *, missing: MissingPolicy = "reject") -> Aggregate:
    """Arithmetic mean of the observed values.

    Raises:
        MissingValueError: a value is missing and ``missing`` is ``"reject"``.
        NumericError: a value is not a number, or no observed value is left.
    """
    return _aggregate("mean", lambda xs: math.fsum(xs) / len(xs), values, missing)


def total(values: Iterable[object], *, missing: MissingPolicy = "reject") -> Aggregate:
    """Sum of the observed values; also available as ``corral.numeric.sum``.

    Raises:
        MissingValueError: a value is missing and ``missing`` is ``"reject"``.
        NumericError: a value is not a number, or no observed value is left.
    """
    return _aggregate("total", math.fsum, values, missing)


def median(values: Iterable[object], *, missing: MissingPolicy = "reject") -> Aggregate:
    """Median of the observed values (the mean of the middle two for an even count).

    Raises:
        MissingValueError: a value is missing and ``missing`` is ``"reject"``.
        NumericError: a value is not a number, or no observed value is left.
    """
    return _aggregate("median", statistics.median, values, missing)


def minimum(values: Iterable[object], *, missing: MissingPolicy = "reject") -> Aggregate:
    """Smallest observed value.

    Raises:
        MissingValueError: a value is missing and ``missing`` is ``"reject"``.
        NumericError: a value is not a number, or no observed value is left.
    """
    return _aggregate("minimum", min, values, missing)


def maximum(values: Iterable[object], *, missing: MissingPolicy = "reject") -> Aggregate:
    """Largest observed value.

    Raises:
        MissingValueError: a value is missing and ``missing`` is ``"reject"``.
        NumericError: a value is not a number, or no observed value is left.
    """
    return _aggregate("maximum", max, values, missing)


# Reachable as an attribute but kept out of __all__, so `from corral.numeric import *` never
# shadows the builtin sum with a function that returns an Aggregate.
sum = total


def _aggregate(
    statistic: str,
    compute: Callable[[list[float]], float],
    values: Iterable[object],
    policy: MissingPolicy,
) -> Aggregate:
    if policy not in _POLICIES:
        raise NumericError(f"missing must be 'reject', 'omit' or 'propagate', not {policy!r}")
    if isinstance(values, str | bytes):
        raise NumericError(f"{statistic} takes a collection of values, not one string")
    observed: list[float] = []
    gaps: list[int] = []
    for index, value in enumerate(values):
        if _is_missing(value):
            gaps.append(index)
            continue
        try:
            observed.append(to_number(value))
        except NumericError as exc:
            raise NumericError(f"{statistic}: value at index {index}: {exc}") from None
    if gaps and policy == "reject":
        raise MissingValueError(statistic, gaps)
    if gaps and policy == "propagate":
        return Aggregate(statistic, None, len(observed), len(gaps), policy)
    if not observed:
        detail = f" after omitting {len(gaps)} missing" if gaps else ""
        raise NumericError(f"{statistic}: no observed values{detail}")
    return Aggregate(statistic, float(compute(observed)), len(observed), len(gaps), policy)


def _is_missing(value: object) -> bool:
    if value is None:
        return True
    # Looked up, never imported: pandas may be absent, and importing it costs ~100 ms.
    pandas = sys.modules.get("pandas")
    if pandas is not None and value is getattr(pandas, "NA", None):
        return True
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    try:
        return math.isnan(value)
    except (OverflowError, TypeError, ValueError):
        return False


def _clip(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
