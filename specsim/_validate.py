"""Eager validation of public arguments (NumPy only; importable by every module).

Every checker takes the argument's public ``name`` first and raises ``ValueError`` whose
message starts with that name and states the allowed range, e.g.
``alpha must lie in [0, 1] (got 1.2)``. They return the argument as a NumPy array
(float64, or int64 for draft lengths) so callers can compute on the result directly.
Booleans are rejected everywhere: ``True`` is not a rate, a length or a cost.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "as_float_array",
    "check_probability",
    "check_nonnegative",
    "check_positive",
    "check_draft_length",
    "check_distribution",
    "broadcast",
]


def _first_bad(x: np.ndarray, bad: np.ndarray) -> str:
    """A short rendering of the first offending value, for error messages."""
    return repr(np.asarray(x)[bad].ravel()[0].item())


def as_float_array(name: str, x) -> np.ndarray:
    """``x`` as a float64 array; rejects booleans, strings, complex and object input."""
    arr = np.asarray(x)
    if arr.dtype == bool:
        raise ValueError(f"{name} must be a real number, not a boolean")
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be a real number or array of them "
                         f"(got dtype {arr.dtype})")
    return arr.astype(np.float64, copy=False)


def check_probability(name: str, x) -> np.ndarray:
    """A rate in [0, 1]; NaN is rejected."""
    arr = as_float_array(name, x)
    bad = ~((arr >= 0.0) & (arr <= 1.0))  # NaN compares False, so it is bad
    if bad.any():
        raise ValueError(f"{name} must lie in [0, 1] (got {_first_bad(arr, bad)})")
    return arr


def check_nonnegative(name: str, x) -> np.ndarray:
    """A finite number >= 0 (cost ratios, times)."""
    arr = as_float_array(name, x)
    bad = ~(np.isfinite(arr) & (arr >= 0.0))
    if bad.any():
        raise ValueError(f"{name} must be finite and >= 0 (got {_first_bad(arr, bad)})")
    return arr


def check_positive(name: str, x) -> np.ndarray:
    """A finite number > 0."""
    arr = as_float_array(name, x)
    bad = ~(np.isfinite(arr) & (arr > 0.0))
    if bad.any():
        raise ValueError(f"{name} must be finite and > 0 (got {_first_bad(arr, bad)})")
    return arr


def check_draft_length(name: str, x, *, minimum: int = 1) -> np.ndarray:
    """An integer >= ``minimum`` (draft length K, k_max); returned as int64.

    Integer dtypes are accepted as they are; float input is accepted only when every
    value is integral and finite (so ``np.arange(1., 9.)`` works but 2.5 does not).
    """
    arr = np.asarray(x)
    if arr.dtype == bool:
        raise ValueError(f"{name} must be an integer >= {minimum}, not a boolean")
    if arr.dtype.kind == "f":
        bad = ~(np.isfinite(arr) & (arr == np.floor(arr)))
        if bad.any():
            raise ValueError(f"{name} must be an integer >= {minimum} "
                             f"(got {_first_bad(arr, bad)})")
    elif arr.dtype.kind not in "iu":
        raise ValueError(f"{name} must be an integer >= {minimum} (got dtype {arr.dtype})")
    bad = arr < minimum
    if bad.any():
        raise ValueError(f"{name} must be an integer >= {minimum} (got {_first_bad(arr, bad)})")
    return arr.astype(np.int64, copy=False)


def check_distribution(name: str, x, *, atol: float = 1e-6) -> np.ndarray:
    """Probability vectors along the last axis: finite, >= 0, summing to 1 within atol.

    ``atol`` defaults to 1e-6 so float32 softmax outputs over large vocabularies pass.
    """
    arr = as_float_array(name, x)
    if arr.ndim == 0:
        raise ValueError(f"{name} must have a last axis holding a distribution "
                         "(got a scalar)")
    bad = ~(np.isfinite(arr) & (arr >= 0.0))
    if bad.any():
        raise ValueError(f"{name} must hold finite probabilities >= 0 "
                         f"(got {_first_bad(arr, bad)})")
    total = arr.sum(axis=-1)
    off = np.abs(total - 1.0) > atol
    if off.any():
        raise ValueError(f"{name} must sum to 1 along the last axis within {atol:g} "
                         f"(got a sum of {_first_bad(total, off)})")
    return arr


def broadcast(**named: np.ndarray) -> tuple[np.ndarray, ...]:
    """Broadcast the arrays against each other; a mismatch names every argument."""
    try:
        return tuple(np.broadcast_arrays(*named.values()))
    except ValueError:
        shapes = ", ".join(f"{k} {np.shape(v)}" for k, v in named.items())
        raise ValueError(f"{', '.join(named)} must broadcast against each other "
                         f"(got shapes {shapes})") from None
