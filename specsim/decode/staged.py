"""Generation calls in stages, so that a loop program can be timed apart from the work
before it: `StagedCall` (prefills, then the loop), and `drafter_prefill_call` (a
drafter's own prefill alone)."""

from __future__ import annotations

import inspect
from typing import Callable

import jax
import jax.numpy as jnp

from specsim.decode.calls import (as_drafter, autoregressive_result, autoregressive_setup,
                                  generate_autoregressive, generate_speculative, meta_fields,
                                  speculative_result, speculative_setup)
from specsim.decode.prefill import drafter_prefill_program
from specsim.decode.shapes import encode_prompts, pad_prompts
from specsim.drafters.base import reads_target_hidden
from specsim.errors import InvalidArgument
from specsim.results import GenerationResult
from specsim.validation import positive_int

__all__ = ["StagedCall", "staged_autoregressive", "staged_speculative",
           "drafter_prefill_call"]


class StagedCall:
    """A generation call in two stages, so that its loop program can be timed alone:
    `prepare` does everything before the loop (the checks, the host work, the target's
    prefill program and, where it runs outside the loop, the drafter's), and calling the
    object runs the prepared loop program and returns its raw output (prepared first if
    `prepare` was not called); `result` turns the last call's output into the
    `GenerationResult` the matching ``generate_*`` call returns (its ``wall_s`` and
    ``compile_s`` are not set). Each prepared state is consumed by one call (its buffers
    are donated); ``prepare(copies=n)`` keeps n of them (the prefills' output and n − 1
    device copies of it), so n calls run the same loop from the same state at the price
    of one prefill.

    `specsim.bench.interleaved_rounds` runs a call's ``prepare`` outside its timed
    region. A speculative policy loop that primes its drafter late (`primes_late`)
    keeps that drafter's prefill inside the loop, as the run pays it."""

    def __init__(self, setup: Callable, result: Callable):
        self._setup, self._result = setup, result
        self._ready: list = []
        self._info = None

    def prepare(self, copies: int = 1) -> None:
        copies = positive_int("copies", copies)
        loop, info = self._setup()
        jax.block_until_ready(loop.args)
        extra = [loop.fresh_copy() for _ in range(copies - 1)]
        jax.block_until_ready([c.args for c in extra])
        self._ready = [(loop, info)] + [(c, info) for c in extra]

    @property
    def prepared(self) -> int:
        """How many calls the prepared states left serve before the next ``prepare``."""
        return len(self._ready)

    def __call__(self):
        if not self._ready:
            self.prepare()
        loop, self._info = self._ready.pop()
        return loop.program(*loop.args, **loop.static)

    def result(self, out) -> GenerationResult:
        if self._info is None:
            raise InvalidArgument("result: this StagedCall has not run (call it first)")
        return self._result(out, self._info)


def _bound(generate, *args, **kwargs) -> dict:
    """``generate``'s arguments by name, defaults applied (an unknown one is a TypeError
    here, at once)."""
    bound = inspect.signature(generate).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def staged_autoregressive(model, prompts, max_new_tokens: int, **kwargs) -> StagedCall:
    """`generate_autoregressive` (same arguments) as a `StagedCall`."""
    a = _bound(generate_autoregressive, model, prompts, max_new_tokens, **kwargs)

    def setup():
        loop, encoded, plan = autoregressive_setup(**a)
        return loop, (encoded, plan)

    def result(out, info):
        encoded, plan = info
        meta = meta_fields(plan, a["temperature"], a["top_k"], a["top_p"], a["seed"])
        return autoregressive_result(out, model, encoded, plan, a["on_nonfinite"],
                                     a["mesh"], meta)

    return StagedCall(setup, result)


def staged_speculative(target, drafter, prompts, max_new_tokens: int,
                       **kwargs) -> StagedCall:
    """`generate_speculative` (same arguments) as a `StagedCall`."""
    a = _bound(generate_speculative, target, drafter, prompts, max_new_tokens, **kwargs)

    def setup():
        loop, run = speculative_setup(**a)
        return loop, (loop, run)

    def result(out, info):
        loop, run = info
        return speculative_result(out, loop, run, target, a["on_nonfinite"], a["mesh"])

    return StagedCall(setup, result)


def drafter_prefill_call(target, drafter, prompts, padded_prompt: int, cache_len: int):
    """A zero-argument call of the drafter's own prefill as `generate_speculative` runs
    it (`drafter_prefill_program`: a draft model's pass over the prompts, its logits
    never computed), over ``prompts`` (token ids) padded to ``padded_prompt``, with
    ``cache_len`` slots (a run's `ShapePlan` gives both). Compiled and run once here.
    For timing that prefill apart from the run (`specsim.experiment.inrun`; a forward
    call through the head would overstate it, see docs/studies/pass-cost-programs.md). A
    drafter reading the target's features observes a zero feature."""
    drafter = as_drafter(drafter, target)
    encoded = encode_prompts(prompts, target, target.cfg)
    P, S = positive_int("padded_prompt", padded_prompt), positive_int("cache_len", cache_len)
    if max(len(p) for p in encoded) > P or P >= S:
        raise InvalidArgument(f"padded_prompt ({P}) must hold the longest prompt "
                              f"({max(len(p) for p in encoded)} tokens) and be below "
                              f"cache_len ({S})")
    arr, lens = pad_prompts(encoded, P)
    arr, lens = jnp.asarray(arr), jnp.asarray(lens)
    B = arr.shape[0]
    feature = (jnp.zeros((B, target.cfg.d_model), jnp.float32)
               if reads_target_hidden(drafter) else None)
    active = jnp.ones((B,), bool)

    def call():
        return drafter_prefill_program(drafter, arr, lens, feature, active, S=S)

    jax.block_until_ready(call())
    return call
