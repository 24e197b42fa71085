"""Eager validation of public arguments (NumPy only; importable by every module).

Every checker takes the argument's public ``name`` first and raises
`specsim.errors.InvalidArgument` (a ``ValueError``) whose message starts with that name
and states the allowed range, e.g. ``alpha must lie in [0, 1] (got 1.2)``.
Booleans are rejected everywhere: ``True`` is not a rate, a length or a cost.

Two kinds of checker:

- scalar ones return a Python number: `integer`, `positive_int`, `nonnegative_int`, `probability`,
  `nonnegative_float`, `positive_float`, `choice`;
- array ones return a NumPy array (float64, or int64 for draft lengths) so the theory
  modules can compute on the result directly: `as_float_array`, `check_probability`,
  `check_nonnegative`, `check_positive`, `check_draft_length`, `check_distribution`,
  `broadcast`.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from specsim.errors import InvalidArgument

__all__ = [
    "integer",
    "positive_int",
    "nonnegative_int",
    "probability",
    "nonnegative_float",
    "positive_float",
    "choice",
    "as_float_array",
    "check_probability",
    "check_nonnegative",
    "check_positive",
    "check_draft_length",
    "reject_fractions",
    "check_distribution",
    "broadcast",
]


# ---- scalars --------------------------------------------------------------------------------
def _integer(name: str, value, what: str) -> int:
    """``value`` as a Python int: ints and NumPy integers only (no bools, no floats)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise InvalidArgument(f"{name} must be {what} (got {value!r})")
    return int(value)


def integer(name: str, value) -> int:
    """Any integer (seeds)."""
    return _integer(name, value, "an integer")


def positive_int(name: str, value, *, minimum: int = 1) -> int:
    """An integer >= ``minimum`` (default 1): batch sizes, lengths, counts."""
    what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    n = _integer(name, value, what)
    if n < minimum:
        raise InvalidArgument(f"{name} must be {what} (got {n})")
    return n


def nonnegative_int(name: str, value) -> int:
    """An integer >= 0."""
    n = _integer(name, value, "an integer >= 0")
    if n < 0:
        raise InvalidArgument(f"{name} must be an integer >= 0 (got {n})")
    return n


def _real(name: str, value, what: str) -> float:
    """``value`` as a Python float: real numbers only (no bools, strings, complex)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InvalidArgument(f"{name} must be {what} (got {value!r})")
    return float(value)


def probability(name: str, value) -> float:
    """A number in [0, 1]; NaN is rejected."""
    x = _real(name, value, "a number in [0, 1]")
    if not 0.0 <= x <= 1.0:
        raise InvalidArgument(f"{name} must be a number in [0, 1] (got {x!r})")
    return x


def nonnegative_float(name: str, value) -> float:
    """A finite number >= 0."""
    x = _real(name, value, "a finite number >= 0")
    if not (math.isfinite(x) and x >= 0.0):
        raise InvalidArgument(f"{name} must be a finite number >= 0 (got {x!r})")
    return x


def positive_float(name: str, value) -> float:
    """A finite number > 0."""
    x = _real(name, value, "a finite number > 0")
    if not (math.isfinite(x) and x > 0.0):
        raise InvalidArgument(f"{name} must be a finite number > 0 (got {x!r})")
    return x


def choice(name: str, value, allowed):
    """``value`` if it is one of ``allowed`` (compared with ==), else an error listing them."""
    allowed = tuple(allowed)
    try:
        ok = value in allowed
    except (TypeError, ValueError):         # unhashable or array-valued
        ok = False
    if not ok:
        listed = ", ".join(repr(a) for a in allowed)
        raise InvalidArgument(f"{name} must be one of {listed} (got {value!r})")
    return value


# ---- arrays ---------------------------------------------------------------------------------
def _first_bad(x: np.ndarray, bad: np.ndarray) -> str:
    """A short rendering of the first offending value, for error messages."""
    return repr(np.asarray(x)[bad].ravel()[0].item())


def reject_fractions(name: str, arr: np.ndarray, rule: str) -> None:
    """For a float array, InvalidArgument "<name> must <rule> (got <value> at index <i>)"
    at its first value that is not a finite integer; other dtypes pass unchecked."""
    if arr.dtype.kind != "f":
        return
    bad = ~(np.isfinite(arr) & (arr == np.floor(arr)))
    if bad.any():
        where = f" at index {int(np.flatnonzero(bad)[0])}" if arr.ndim else ""
        raise InvalidArgument(f"{name} must {rule} (got {_first_bad(arr, bad)}{where})")


def as_float_array(name: str, x) -> np.ndarray:
    """``x`` as a float64 array; rejects booleans, strings, complex and object input."""
    arr = np.asarray(x)
    if arr.dtype == bool:
        raise InvalidArgument(f"{name} must be a real number, not a boolean")
    if arr.dtype.kind not in "iuf":
        raise InvalidArgument(f"{name} must be a real number or array of them "
                         f"(got dtype {arr.dtype})")
    return arr.astype(np.float64, copy=False)


def check_probability(name: str, x) -> np.ndarray:
    """A rate in [0, 1]; NaN is rejected."""
    arr = as_float_array(name, x)
    bad = ~((arr >= 0.0) & (arr <= 1.0))  # NaN compares False, so it is bad
    if bad.any():
        raise InvalidArgument(f"{name} must lie in [0, 1] (got {_first_bad(arr, bad)})")
    return arr


def check_nonnegative(name: str, x) -> np.ndarray:
    """A finite number >= 0 (cost ratios, times)."""
    arr = as_float_array(name, x)
    bad = ~(np.isfinite(arr) & (arr >= 0.0))
    if bad.any():
        raise InvalidArgument(f"{name} must be finite and >= 0 (got {_first_bad(arr, bad)})")
    return arr


def check_positive(name: str, x) -> np.ndarray:
    """A finite number > 0."""
    arr = as_float_array(name, x)
    bad = ~(np.isfinite(arr) & (arr > 0.0))
    if bad.any():
        raise InvalidArgument(f"{name} must be finite and > 0 (got {_first_bad(arr, bad)})")
    return arr


def check_draft_length(name: str, x, *, minimum: int = 1) -> np.ndarray:
    """An integer >= ``minimum`` (draft length K, k_max); returned as int64.

    Integer dtypes are accepted as they are; float input is accepted only when every
    value is integral and finite (so ``np.arange(1., 9.)`` works but 2.5 does not).
    """
    arr = np.asarray(x)
    if arr.dtype == bool:
        raise InvalidArgument(f"{name} must be an integer >= {minimum}, not a boolean")
    if arr.dtype.kind not in "iuf":
        raise InvalidArgument(f"{name} must be an integer >= {minimum} (got dtype {arr.dtype})")
    reject_fractions(name, arr, f"be an integer >= {minimum}")
    bad = arr < minimum
    if bad.any():
        raise InvalidArgument(f"{name} must be an integer >= {minimum} "
                              f"(got {_first_bad(arr, bad)})")
    return arr.astype(np.int64, copy=False)


def check_distribution(name: str, x, *, atol: float = 1e-6) -> np.ndarray:
    """Probability vectors along the last axis: finite, >= 0, summing to 1 within atol.

    ``atol`` defaults to 1e-6 so float32 softmax outputs over large vocabularies pass.
    """
    arr = as_float_array(name, x)
    if arr.ndim == 0:
        raise InvalidArgument(f"{name} must have a last axis holding a distribution "
                         "(got a scalar)")
    bad = ~(np.isfinite(arr) & (arr >= 0.0))
    if bad.any():
        raise InvalidArgument(f"{name} must hold finite probabilities >= 0 "
                         f"(got {_first_bad(arr, bad)})")
    total = arr.sum(axis=-1)
    off = np.abs(total - 1.0) > atol
    if off.any():
        raise InvalidArgument(f"{name} must sum to 1 along the last axis within {atol:g} "
                         f"(got a sum of {_first_bad(total, off)})")
    return arr


def broadcast(**named: np.ndarray) -> tuple[np.ndarray, ...]:
    """Broadcast the arrays against each other; a mismatch names every argument."""
    try:
        return tuple(np.broadcast_arrays(*named.values()))
    except ValueError:  # NumPy's own broadcast error
        shapes = ", ".join(f"{k} {np.shape(v)}" for k, v in named.items())
        raise InvalidArgument(f"{', '.join(named)} must broadcast against each other "
                         f"(got shapes {shapes})") from None
