"""Compile accounting: how often each program was traced, and how much of a call's wall
time went to compiling.

``TRACE_COUNTS`` is incremented (a Python side effect) each time a program is traced: a
second call with the same shapes must leave it unchanged. `timed` sets a result's
``compile_s`` from JAX's monitoring events (tracing, lowering, compiling or reading the
persistent cache) and its ``wall_s`` to the call less that time.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from functools import wraps

import jax

__all__ = ["TRACE_COUNTS", "COMPILE_EVENTS", "timed"]

TRACE_COUNTS: collections.Counter = collections.Counter()

COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration")
"""The JAX monitoring events whose spans count as compiling."""

_COMPILE_SPANS: list[tuple[float, float]] = []


def _on_span(event: str, start: float, end: float, **_):
    if event in COMPILE_EVENTS:
        _COMPILE_SPANS.append((start, end))


jax.monitoring.register_event_time_span_listener(_on_span)


def _union_seconds(spans) -> float:
    """The length of the union of (start, end) spans: nested traces overlap, so spans are
    merged, not summed."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        total += max(end - max(start, reach), 0.0)
        reach = max(reach, end)
    return total


def timed(generate):
    """Wrap a ``generate_*`` call: set ``wall_s`` (the call less compiling) and
    ``compile_s`` on the result it returns."""
    @wraps(generate)
    def call(*args, **kwargs):
        t0, n0 = time.perf_counter(), len(_COMPILE_SPANS)
        result = generate(*args, **kwargs)
        wall = time.perf_counter() - t0
        compile_s = _union_seconds(_COMPILE_SPANS[n0:])
        del _COMPILE_SPANS[n0:]
        return dataclasses.replace(result, wall_s=max(wall - compile_s, 0.0),
                                   compile_s=compile_s)
    return call
