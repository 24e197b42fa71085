"""specsim: speculative decoding theory, engine and hardware models.

Glossary (one name per meaning; docs/design.md has the formulas):

- ``k``: draft length K, the drafts proposed per speculative iteration (the KV-head
  count is always ``n_kv_heads``).
- ``alpha_per_slot``: accepted drafts over the K draft slots of every iteration; a slot
  the drafter left empty counts as a rejection (the verify pass paid for it). The α of
  E(α, K) for a run at draft length K.
- ``alpha_per_proposal``: accepted drafts over drafts actually proposed. Say which α
  wherever one is printed.
- ``tokens_per_iteration``: E, tokens one iteration yields (accepted + 1), between 1
  and K + 1; E(α, K) = (1 − α^(K+1)) / (1 − α) for i.i.d. acceptance.
- ``cache_len``: KV slots of a cache (S in shape comments; never ``max_len``).
- ``context``: tokens already in the cache when a forward pass runs.
- ``cost_ratio`` (``c`` in the closed forms, and only there): measured draft step time
  over target step time at the same batch.
- kind of work vs fit form: a *kind* of work is the workload a prompt comes from
  (``specsim.workloads.KINDS``: code, json, extraction, prose); a *fit form* is the
  functional form of a roofline latency fit (``specsim.fit``: "max" or "smooth"). Two
  different lists; never call both "kinds".

Errors are `specsim.errors.SpecsimError` subclasses (all ``ValueError``s); public
arguments are checked by `specsim.validation`.
"""
__version__ = "0.1.0"

# Notebooks get JAX's persistent compilation cache by default (no JAX import here; see
# specsim.compile_cache; SPECSIM_COMPILATION_CACHE=0 turns it off).
from specsim import compile_cache as _compile_cache  # noqa: E402

_compile_cache.enable_in_notebook()


def __getattr__(name):
    """``specsim.predict``: the hardware what-if (`specsim.what_if.predict`), imported on
    first use so that ``import specsim`` stays light and JAX-free."""
    if name == "predict":
        from specsim.what_if import predict
        return predict
    raise AttributeError(f"module 'specsim' has no attribute {name!r}")
