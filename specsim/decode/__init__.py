"""Generation: the autoregressive baseline and the speculative loop, each ONE jitted
program (a `lax.while_loop` over a state pytree with fixed-size buffers), started from
the state a shared prefill program returns.

    generate_autoregressive(model, prompts, max_new_tokens, temperature, top_k, top_p, seed)
    generate_speculative(target, drafter, prompts, max_new_tokens, k, temperature, top_k,
                         top_p, seed, policy=None)
    generate_tree(target, drafter, prompts, max_new_tokens, tree, temperature, top_k,
                  top_p, seed)

One concept per module:

- `shapes`: prompts encoded and checked, padded sizes bucketed (`plan_shapes`);
- `loop_state`: the state and bookkeeping every loop shares (`LoopState`, `advance`);
- `prefill`: the target's and the drafter's prefill programs, shared by every loop;
- `autoregressive`: the one-token-per-pass loop;
- `speculative`: the fixed-K loop and the verify step and statistics all speculative
  loops share;
- `policy_verify`, `policy_loop`: the loop under a draft-length policy (per-row K, the
  verify pass at a few compiled widths, the off iterations, late priming);
- `accounting`: ``TRACE_COUNTS`` and the compile time a call spent;
- `calls`, `staged`: the public calls, the loop programs they would run (`LoopCall`),
  and the same calls in stages for timing (`StagedCall`);
- `reference`: the target's greedy continuation, a reference for measuring drafters;
- `tree_verify`, `tree_loop`: tree speculative decoding (one pass over a token tree with
  the tree mask, the accepted path found and its cache entries moved on the device).

Results (`GenerationResult`, `SpeculativeStats`, `ShapePlan`) live in `specsim.results`.
"""

from specsim.decode.accounting import TRACE_COUNTS
from specsim.decode.calls import (LoopCall, NonFiniteLogitsError, autoregressive_loop,
                                  generate_autoregressive, generate_speculative,
                                  speculative_loop)
from specsim.decode.policy_loop import primes_late
from specsim.decode.reference import reference_tokens
from specsim.decode.shapes import bucket, plan_shapes, warmup_tokens
from specsim.decode.tree_loop import generate_tree, tree_loop
from specsim.decode.staged import (StagedCall, drafter_prefill_call, staged_autoregressive,
                                   staged_speculative)
from specsim.results import GenerationResult, ShapePlan, SpeculativeStats

# The name specsim.experiment reads until it moves to `primes_late`.
_primes_late = primes_late

__all__ = ["GenerationResult", "SpeculativeStats", "ShapePlan", "NonFiniteLogitsError",
           "generate_autoregressive", "generate_speculative", "plan_shapes", "warmup_tokens",
           "TRACE_COUNTS", "bucket", "LoopCall", "speculative_loop", "autoregressive_loop",
           "drafter_prefill_call", "StagedCall", "staged_autoregressive",
           "staged_speculative", "reference_tokens", "primes_late", "generate_tree",
           "tree_loop"]
