"""Draft proposers for speculative decoding, as pure functions over pytrees.

A drafter is a pytree (its arrays are children, its configuration is static aux data),
so it is passed straight into the compiled loop of `specsim.decode` and a second call
with an equal drafter hits the compile cache. The interface has three methods:

    state = drafter.init_state(prompts [B, P], prompt_lens [B], cache_len S)
    state, draft = drafter.propose(state, context, k, key, sampling)
    state = drafter.commit(state, n_accepted [B], active [B])

`init_state` runs in a program of its own (`decode.prefill.drafter_prefill_program`, once per
drafter and buffer sizes, whatever K), whose result the loop program takes donated;
under a draft-length policy that may switch speculation off, a draft model (one with
``sync``) runs it inside the loop instead, at its first draft (`specsim.decode.primes_late`).

``context`` is the loop's token buffer: ``Context(tokens [B, N], length [B])``, holding
prompt + output so far; ``length[b]`` counts the valid tokens of row b and is >= 2
whenever `propose` is called (the first new token comes from the target's prefill).
``draft`` is ``Draft(tokens [B, K] int32, probs [B, K, V] fp32)``: the proposed tokens and
the distribution each was drawn from, after the same temperature/top-k/top-p
processing as the target. A row of zeros in ``probs`` means "no proposal at this
position": the verifier rejects it and samples from the target itself, so a drafter may
propose fewer than K tokens (the n-gram drafter does when there is no match) and stay
exact. A deterministic drafter has a one-hot ``probs``; rejection sampling with a one-hot
draft distribution is still exact.

Model drafters keep a KV cache holding all but the last TWO tokens of the context. Their
first draft step runs the last two tokens (re-writing the second-to-last, which may be a
draft the cache has not seen when every draft was accepted), the other K−1 steps run one
token each (a `lax.scan`). `propose` returns the cache with its length set back to where
it started; `commit` advances it by the n_accepted + 1 tokens the row kept (rolling back
the rejected drafts is just not counting them).

Drafters: `ModelDrafter` (a small model sharing the target's vocabulary; also the
layer-skip self-draft, see `layer_skip_drafter`), `NGramDrafter` (prompt lookup) and
`InstrumentDrafter` (set acceptance and draft cost, for measurement; temperature 0 only,
see `instrument_drafter` and `specsim.decode.reference_tokens`), `DistilledDrafter` (a draft trained by `specsim.train`, its head
restricted to the most frequent tokens; see `distilled_drafter`).
Tree drafters (`specsim.drafters.tree`, `specsim.drafters.dynamic_tree`,
`specsim.drafters.medusa`) propose a token tree for `specsim.decode.generate_tree` through ``propose_tree`` and ``commit_tree``.
A new drafter (a trained head, a tree) implements the same three methods, in a module of
its own in this package (`base` holds the interface, `model`, `ngram` one drafter each).
"""

from __future__ import annotations

from specsim.drafters.base import (OFF_DRAFTS, Context, Draft, Drafter, check_drafter,
                                   drafts_free, gather_last, off_draft, reads_target_hidden)
from specsim.drafters.model import ModelDrafter, layer_skip_drafter, model_drafter
from specsim.drafters.ngram import NGramDrafter
from specsim.drafters.distilled import DistilledDrafter, distilled_drafter
from specsim.drafters.instrument import InstrumentDrafter, instrument_drafter
from specsim.drafters.quantized import quantized_self_drafter
from specsim.drafters.feature_head import FeatureHeadDrafter, feature_head_drafter
from specsim.drafters.tree import (ChainTreeDrafter, FeatureHeadTreeDrafter, ModelTreeDrafter,
                                   NGramTreeDrafter, TreeDraft, as_tree_drafter, branches_tree)
from specsim.drafters.dynamic_tree import DynamicTreeDrafter, dynamic_tree_drafter
from specsim.drafters.medusa import MedusaDrafter, medusa_drafter

__all__ = ["Context", "Draft", "Drafter", "drafts_free", "off_draft", "OFF_DRAFTS",
           "reads_target_hidden", "ModelDrafter", "NGramDrafter", "model_drafter",
           "layer_skip_drafter", "check_drafter", "gather_last",
           "InstrumentDrafter", "instrument_drafter",
           "DistilledDrafter", "distilled_drafter", "quantized_self_drafter",
           "FeatureHeadDrafter", "feature_head_drafter",
           "TreeDraft", "ChainTreeDrafter", "ModelTreeDrafter", "FeatureHeadTreeDrafter",
           "NGramTreeDrafter", "as_tree_drafter", "branches_tree", "DynamicTreeDrafter",
           "dynamic_tree_drafter", "MedusaDrafter", "medusa_drafter"]


def __getattr__(name):
    # specsim.experiment reads reference_tokens here until it imports it from
    # specsim.decode (this import is the drafters -> decode edge test_layers reports).
    if name == "reference_tokens":
        from specsim.decode import reference_tokens
        return reference_tokens
    raise AttributeError(f"module 'specsim.drafters' has no attribute {name!r}")
