"""The instrument drafter: acceptance and draft cost set, not hoped for.

At temperature 0 the speculative loop's context is always prompt + the target's greedy
continuation so far, so the target's greedy next K tokens are known in advance from a
reference autoregressive run of the same prompts: ``reference[b, length[b] + j]``. The
instrument proposes exactly those, replacing position j by a wrong token (any token
other than the reference one) with probability 1 − α, where the "correct" indicators
follow one of the acceptance models of `specsim.analytic`:

* ``"iid"``: every position correct with probability α (E = (1 − α^(K+1)) / (1 − α));
* ``"positional"``: position j correct with probability α_j (E = 1 + Σₖ Πⱼ≤ₖ αⱼ);
* ``"markov"``: the indicator is the two-state chain of `analytic.markov_transitions`
  (stationary rate α, lag-1 correlation ρ) along the generated sequence, bonus and
  correction positions included (E = `analytic.expected_tokens_markov`).

A wrong token is always rejected by greedy verification and a correct one always
accepted, so the run's acceptance follows the set model exactly, and the output is
exactly the target's greedy output (the verifier decides every token). Draft
distributions are one-hot.

Cost: each of the K draft steps runs a real computation, the first ``layers`` layers of
the target over one token with a KV cache of their own, followed (``head=True``) by the
final norm and the full vocabulary head, or (``head=False``) by a 16-row head. Its
result chooses which wrong token is proposed, so XLA cannot remove it, and step j+1
runs on the token step j proposed. ``layers=0`` does no work (c ≈ 0); ``layers`` = all
with ``head=True`` is a whole target step over one token (c ≈ 1). The cost ratio c is
never assumed: time it (`specsim.pass_costs`).

Temperature > 0: the target's token is then a random draw, so no reference can say
which token would be accepted and no α can be promised. The instrument refuses it:
`check_sampling` raises before anything compiles (the speculative loop calls it when a
drafter has it), and `propose` raises at trace time as a second guard.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specsim.errors import InvalidArgument
from specsim.drafters.base import Context, Draft, gather_last
from specsim.models.config import ModelConfig
from specsim.models.transformer import forward, init_cache, select_layers
from specsim.sampling import SamplingParams, argmax

__all__ = ["InstrumentDrafter", "InstrumentSpec", "instrument_drafter", "cost_config", "FORMS",
           "SMALL_HEAD"]

FORMS = ("iid", "positional", "markov")
DRAWS = ("random", "quasi")
SMALL_HEAD = 16   # rows of the head when head=False (a negligible cost)


# the golden ratio's fractional part, 32-bit fixed point: the step of the quasi-random draws
_GOLDEN = np.uint32(int((math.sqrt(5.0) - 1.0) / 2.0 * 2 ** 32))


@dataclass(frozen=True, kw_only=True)
class InstrumentSpec:
    """The static part of an instrument drafter (hashable: jit's static data).
    ``covers``: new tokens past each prompt that the reference holds (the minimum over
    rows); ``k``: the profile length for ``form="positional"`` (else None)."""
    form: str
    vocab_size: int
    layers: int
    head: bool
    draft_cfg: ModelConfig | None
    covers: int
    k: int | None = None
    draws: str = "random"


class InstrumentState(NamedTuple):
    cache: Any             # KVCache of the cost layers, or () when there is no work
    prev: jax.Array        # [B] int32 latent state of the last kept position (-1 unset)
    if_all: jax.Array      # [B] int32 latent state of the bonus position (markov)
    k: jax.Array           # [] int32 K of the last proposal
    shift: jax.Array       # [B] uint32 shifts of the quasi-random draws
    it: jax.Array          # [] uint32 proposals made (the quasi-random sequence's index)


@jax.tree_util.register_pytree_node_class
@dataclass(frozen=True)
class InstrumentDrafter:
    """Children: ``reference`` [B, N] int32 (prompt + greedy continuation per row),
    ``rates`` fp32 ([1] α for iid, [K] α_j for positional, [2] (p01, p11) for markov),
    ``params`` (the cost layers' weights, None without work). Static: ``spec``."""
    reference: jax.Array
    rates: jax.Array
    params: Any
    spec: InstrumentSpec
    name: str = "instrument"

    # The name stays out of the static data, so drafters that differ only in their
    # rates (a traced child) share one compiled program.
    def tree_flatten(self):
        return (self.reference, self.rates, self.params), self.spec

    @classmethod
    def tree_unflatten(cls, spec, children):
        return cls(*children, spec)

    @property
    def vocab_size(self) -> int:
        return self.spec.vocab_size

    @property
    def has_work(self) -> bool:
        return self.spec.layers > 0

    def passes_per_iteration(self, k: int) -> int:
        return k if self.has_work else 0

    def max_cache_len(self) -> int | None:
        return None

    # ---- eager checks (the loop calls these before compiling) ----------------------------
    def check_sampling(self, temperature) -> None:
        """Refuse temperature > 0: the target's token is then random and no α can be
        promised (see the module docstring)."""
        if not (isinstance(temperature, (int, float, np.number)) and float(temperature) == 0):
            raise InvalidArgument(
                f"temperature must be 0 for the instrument drafter (got {temperature!r}): "
                f"above 0 the target samples its token, so the set acceptance rate cannot "
                f"be promised")

    def check_run(self, *, max_new_tokens: int, k: int, temperature=0.0) -> None:
        """Eager checks of one run: temperature, draft length against a per-position
        profile, and that the reference covers max_new_tokens + k − 1 new tokens."""
        self.check_sampling(temperature)
        self._check_k(k)
        need = int(max_new_tokens) + int(k) - 1
        if self.spec.covers < need:
            raise InvalidArgument(
                f"reference too short: it holds {self.spec.covers} new tokens per prompt but "
                f"max_new_tokens ({max_new_tokens}) + k ({k}) - 1 = {need} are needed; build "
                f"it with max_new_tokens >= {max_new_tokens} and k_max >= {k}")

    def _check_k(self, k: int) -> None:
        if self.spec.form == "positional" and int(k) != self.spec.k:
            raise InvalidArgument(f"k ({k}) must equal the length of the per-position profile "
                             f"alphas ({self.spec.k})")

    # ---- the drafter protocol ---------------------------------------------------------------
    def init_state(self, prompts, prompt_lens, cache_len: int) -> InstrumentState:
        B = prompts.shape[0]
        if B != self.reference.shape[0]:
            raise InvalidArgument(f"the instrument's reference has {self.reference.shape[0]} rows "
                             f"but the run has {B} prompts; build it from the same prompts")
        cache = init_cache(self.spec.draft_cfg, B, cache_len) if self.has_work else ()
        minus = jnp.full((B,), -1, jnp.int32)
        # the quasi-random draws' shifts: drawn at the first proposal (its key)
        unset = jnp.zeros((B,), jnp.uint32)
        return InstrumentState(cache, minus, minus, jnp.int32(0), unset, jnp.uint32(0))

    def propose(self, state: InstrumentState, context: Context, k: int, key,
                sampling: SamplingParams):
        if not sampling.greedy:
            raise InvalidArgument("temperature must be 0 for the instrument drafter (the "
                             "target samples its token above 0; see check_sampling)")
        self._check_k(k)
        B, N = self.reference.shape
        idx = jnp.clip(context.length[:, None] + jnp.arange(k)[None], 0, N - 1)   # [B, K]
        ref = jnp.take_along_axis(self.reference, idx, axis=1)                      # [B, K]
        u, shift = self._uniforms(state, k, key)                                   # [B, K+2]
        latent = self._latent(state.prev, k, u)                                    # [B, K+1]
        correct = latent[:, :k] == 1                                               # [B, K]
        tokens, cache = self._tokens(state.cache, context, ref, correct)          # [B, K]
        probs = jax.nn.one_hot(tokens, self.vocab_size, dtype=jnp.float32)         # [B, K, V]
        state = InstrumentState(cache, state.prev, latent[:, k], jnp.int32(k), shift,
                                state.it + jnp.uint32(1))
        return state, Draft(tokens, probs)

    def commit(self, state: InstrumentState, n_accepted, active) -> InstrumentState:
        # a rejection ends an iteration in the reject state; after K acceptances the
        # bonus position has the latent state drawn for it
        after = jnp.where(n_accepted >= state.k, state.if_all, 0)
        return state._replace(prev=jnp.where(active, after, state.prev))

    # ---- pieces ---------------------------------------------------------------------------------
    def _uniforms(self, state: InstrumentState, k: int, key):
        """[B, K+2] uniforms of this proposal and the shifts to keep: fresh pseudo-random
        draws, or for ``draws="quasi"`` one draw per row and proposal from a randomly
        shifted golden-ratio sequence, u = frac(shift + it · φ), exact in 32-bit fixed
        point, repeated along the positions (`_latent` then takes the number of leading
        correct drafts by inversion)."""
        B = state.prev.shape[0]
        if self.spec.draws == "random":
            return jax.random.uniform(key, (B, k + 2)), state.shift
        fresh = jax.random.bits(key, (B,), jnp.uint32)
        shift = jnp.where(state.it == 0, fresh, state.shift)                       # [B]
        bits = shift + state.it * jnp.uint32(_GOLDEN)                 # wraps: frac() exactly
        u = (bits >> 8).astype(jnp.float32) * (1.0 / (1 << 24))                   # [B]
        return jnp.broadcast_to(u[:, None], (B, k + 2)), shift

    def _latent(self, prev, k: int, u) -> jax.Array:
        """Latent accept (1) / reject (0) states of the K draft positions and the bonus
        position from uniforms ``u`` [B, K+2] → [B, K+1] int32."""
        form, r = self.spec.form, self.rates
        if self.spec.draws == "quasi":
            # one uniform per proposal: position j is correct while u < α_1 ⋯ α_j, so
            # the number of leading correct drafts has its exact law and a run's draws
            # are spread evenly over it (a drafted token after the first wrong one is
            # never verified, so its state does not matter)
            rates = jnp.broadcast_to(r, (k,)) if form == "iid" else r[:k]
            reach = jnp.cumprod(rates)                                             # [K]
            correct = (u[:, :1] < reach[None]).astype(jnp.int32)                   # [B, K]
            return jnp.concatenate([correct, jnp.zeros_like(correct[:, :1])], 1)
        if form == "iid":
            return (u[:, :k + 1] < r[0]).astype(jnp.int32)
        if form == "positional":
            rates = jnp.concatenate([r, r[-1:]])                                   # bonus: unused
            return (u[:, :k + 1] < rates[None]).astype(jnp.int32)
        p01, p11 = r[0], r[1]
        pk = p11 ** k
        pi1 = p01 * pk / (1.0 - pk * p11 + p01 * pk)   # stationary start over iterations
        s = jnp.where(prev >= 0, prev, (u[:, k + 1] < pi1).astype(jnp.int32))      # [B]
        out = []
        for j in range(k + 1):
            s = (u[:, j] < jnp.where(s == 1, p11, p01)).astype(jnp.int32)
            out.append(s)
        return jnp.stack(out, axis=1)

    def _wrong(self, ref, j, dep):
        """A token ≠ ref, chosen by the cost computation's result ``dep`` [B]."""
        V = self.vocab_size
        return (ref + 1 + (j + dep) % (V - 1)) % V

    def _tokens(self, cache, context: Context, ref, correct):
        """Proposed tokens [B, K]: the reference where correct, else a wrong token picked
        by the cost layers run over the previous proposal (a chain of K steps)."""
        k = ref.shape[1]
        if not self.has_work:
            j = jnp.arange(k, dtype=jnp.int32)[None]
            return jnp.where(correct, ref, self._wrong(ref, j, 0)).astype(jnp.int32), cache
        dcfg = self.spec.draft_cfg
        cache = cache._replace(length=context.length - 1)
        tok0 = gather_last(context.tokens, context.length, 1)                      # [B]

        def step(carry, xs):
            cache, tok = carry
            ref_j, ok_j, j = xs
            logits, cache = forward(self.params, dcfg, (tok % dcfg.vocab_size)[:, None], cache)
            dep = argmax(logits[:, 0])              # [B]
            nxt = jnp.where(ok_j, ref_j, self._wrong(ref_j, j, dep)).astype(jnp.int32)
            return (cache, nxt), nxt

        xs = (ref.T, correct.T, jnp.arange(k, dtype=jnp.int32))
        (cache, _), toks = jax.lax.scan(step, (cache, tok0), xs)                   # [K, B]
        return toks.T, cache


# ---- construction ---------------------------------------------------------------------------------
def _check_rate(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)) \
            or not 0.0 <= float(value) <= 1.0:
        raise InvalidArgument(f"{name} must be a number in [0, 1], got {value!r}")
    return float(value)


def _rates(alpha, alphas, rho) -> tuple[str, np.ndarray, int | None]:
    """(form, rates, profile length) from the acceptance arguments."""
    from specsim import analytic

    if (alpha is None) == (alphas is None):
        raise InvalidArgument("give exactly one of alpha (i.i.d. or, with rho, Markov) and alphas "
                         "(a per-position profile)")
    if alphas is not None:
        if rho is not None:
            raise InvalidArgument("rho applies to alpha (the Markov form), not to alphas")
        arr = np.asarray(alphas, dtype=float).reshape(-1)
        if arr.size < 1:
            raise InvalidArgument("alphas must hold one rate per draft position (K >= 1 values)")
        for j, a in enumerate(arr):
            _check_rate(f"alphas[{j}]", float(a))
        return "positional", arr, arr.size
    a = _check_rate("alpha", alpha)
    if rho is None:
        return "iid", np.asarray([a]), None
    if isinstance(rho, bool) or not isinstance(rho, (int, float, np.number)) \
            or not math.isfinite(float(rho)):
        raise InvalidArgument(f"rho must be a finite number, got {rho!r}")
    p01, p11 = analytic.markov_transitions(a, float(rho))   # raises naming rho's range
    return "markov", np.asarray([float(p01), float(p11)]), None


def cost_config(cfg: ModelConfig, layers: int, head: bool = False) -> ModelConfig:
    """The config of one draft step's computation for a target of config ``cfg``: its
    first ``layers`` layers with the full head (``head``) or a SMALL_HEAD-row one, the
    shapes a roofline costs the instrument at (`_cost_model` builds its weights)."""
    sub = cfg.replace(n_layers=int(layers))
    return sub if head else sub.replace(vocab_size=SMALL_HEAD)


def _cost_model(target, layers, head: bool):
    """(params, cfg) of the cost computation: the first ``layers`` target layers with the
    full head or a SMALL_HEAD-row one; (None, None) for layers = 0."""
    cfg = target.cfg
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)) \
            or not 0 <= layers <= cfg.n_layers:
        raise InvalidArgument(f"layers (the draft step's cost) must be an integer in "
                         f"[0, {cfg.n_layers}] (target layers run per draft step), got "
                         f"{layers!r}")
    if not isinstance(head, bool):
        raise InvalidArgument(f"head must be True or False, got {head!r}")
    if layers == 0:
        if head:
            raise InvalidArgument("head=True needs layers >= 1 (layers=0 means no work at all)")
        return None, None
    params, sub = select_layers(target.params, cfg, range(int(layers)))
    if not head:
        params = dict(params, embed=params["embed"][:SMALL_HEAD])
        if "lm_head" in params:
            params["lm_head"] = params["lm_head"][:, :SMALL_HEAD]
        sub = sub.replace(vocab_size=SMALL_HEAD)
    return params, sub.replace(name=f"{sub.name}{'' if head else '-smallhead'}")


def instrument_drafter(target, prompts, max_new_tokens: int, *, k_max: int, reference,
                       alpha=None, alphas=None, rho=None, layers: int = 0,
                       head: bool = False, draws: str = "random",
                       name: str | None = None) -> InstrumentDrafter:
    """An instrument drafter for ``target`` on ``prompts`` (the same list, in the same
    order, that the speculative run gets), runs of up to ``max_new_tokens`` with K up to
    ``k_max``. Acceptance: ``alpha`` (i.i.d.), ``alpha`` + ``rho`` (Markov) or ``alphas``
    (per-position profile, then K must equal its length). Cost per draft step:
    ``layers`` target layers (0..L) and the full head if ``head``. ``reference``:
    (tokens [B, N], prompt lengths [B]), the target's greedy continuation of ``prompts``
    by at least max_new_tokens + k_max − 1 tokens (`specsim.decode.reference_tokens`
    with max_new_tokens + k_max + 1; one reference run serves many drafters).
    ``draws``: "random" (pseudo-random accept/reject states, independent across
    proposals) or "quasi" (one golden-ratio-sequence draw per proposal and row, inverted
    into the number of leading correct drafts: a short run realises its set acceptance
    about three times more closely; i.i.d. and per-position forms only. Its proposals
    are not independent, so a batched run's slowest row is not the maximum over
    independent rows the theory takes: use "random" at batch > 1)."""
    form, rates, k_profile = _rates(alpha, alphas, rho)
    if draws not in DRAWS:
        raise InvalidArgument(f"draws must be one of {DRAWS}, got {draws!r}")
    if draws == "quasi" and form == "markov":
        raise InvalidArgument("draws='quasi' applies to the i.i.d. and per-position forms; "
                              "the Markov form (rho) draws its chain pseudo-randomly")
    if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 1:
        raise InvalidArgument(f"k_max must be an integer >= 1, got {k_max!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, (int, np.integer)) \
            or max_new_tokens < 1:
        raise InvalidArgument(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if k_profile is not None and k_max < k_profile:
        k_max = k_profile
    params, dcfg = _cost_model(target, layers, head)
    ref, plens, covers = _check_reference(reference, target.cfg.vocab_size,
                                          max_new_tokens + k_max - 1)
    what = {"iid": lambda: f"a{rates[0]:g}", "markov": lambda: f"a{alpha:g}-rho{rho:g}",
            "positional": lambda: "a" + "-".join(f"{a:g}" for a in rates)}[form]()
    spec = InstrumentSpec(form=form, vocab_size=target.cfg.vocab_size, layers=int(layers),
                          head=head, draft_cfg=dcfg, covers=covers, k=k_profile,
                          draws=draws)
    return InstrumentDrafter(jnp.asarray(ref), jnp.asarray(rates, jnp.float32), params, spec,
                             name or f"instrument:{what}:L{layers}{'+head' if head else ''}")


def _check_reference(reference, vocab_size: int, need: int):
    try:
        ref, plens = reference
    except (TypeError, ValueError):
        raise InvalidArgument("reference must be a pair (tokens [B, N], prompt lengths [B]) as "
                         "specsim.decode.reference_tokens returns") from None
    ref, plens = np.asarray(ref), np.asarray(plens)
    if ref.ndim != 2 or ref.dtype.kind not in "iu" or plens.shape != (ref.shape[0],):
        raise InvalidArgument(f"reference must be integer tokens [B, N] with prompt lengths [B]; "
                         f"got shapes {ref.shape}, {plens.shape}")
    if ref.size and (ref.min() < 0 or ref.max() >= vocab_size):
        raise InvalidArgument(f"reference token ids must lie in [0, {vocab_size - 1}]")
    # every row holds the same number of new tokens; rows are padded to the longest
    covers = int(ref.shape[1] - plens.max())
    if covers < need:
        raise InvalidArgument(f"reference too short: it holds {covers} new tokens per prompt, "
                         f"max_new_tokens + k_max - 1 = {need} are needed")
    return ref.astype(np.int32), plens.astype(np.int32), covers
