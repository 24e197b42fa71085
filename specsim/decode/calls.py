"""The public generation calls: checks on the host, the prefill programs, the loop
program, and the `GenerationResult`.

    generate_autoregressive(model, prompts, max_new_tokens, temperature, top_k, top_p, seed)
    generate_speculative(target, drafter, prompts, max_new_tokens, k, temperature, top_k,
                         top_p, seed, policy=None)

`autoregressive_loop` and `speculative_loop` return the loop program a call would run,
with its arguments (a `LoopCall`), without running it: for timing its compile or
reading its HLO.
"""

from __future__ import annotations

import inspect
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from specsim import policies, sharding
from specsim.decode.accounting import timed
from specsim.decode.autoregressive import autoregressive_program
from specsim.decode.loop_state import DONATED
from specsim.decode.policy_loop import policy_program, primes_late
from specsim.decode.prefill import drafter_prefill_program, prefill_program
from specsim.decode.shapes import encode_prompts, pad_prompts, plan_shapes, resolve_eos
from specsim.decode.speculative import speculative_program
from specsim.drafters.base import check_drafter, reads_target_hidden
from specsim.drafters.model import model_drafter
from specsim.errors import InvalidArgument
from specsim.results import GenerationResult, ShapePlan, SpeculativeStats
from specsim.sampling import SamplingParams
from specsim.validation import choice, integer, positive_int

__all__ = ["NonFiniteLogitsError", "LoopCall", "generate_autoregressive",
           "generate_speculative", "autoregressive_loop", "speculative_loop", "as_drafter"]


class NonFiniteLogitsError(FloatingPointError):
    """Raised when a run met non-finite logits (``on_nonfinite="raise"``); the result,
    with the affected rows stopped before the bad step, is in ``.result``."""

    def __init__(self, message: str, result: "GenerationResult"):
        super().__init__(message)
        self.result = result


def _finish(common, prompts: list[list[int]], model, on_nonfinite: str, **fields):
    tokens = np.asarray(common.tokens)
    length = np.asarray(common.length)
    nonfinite = np.asarray(common.nonfinite)
    eos_hit = np.asarray(common.eos_hit)
    out, reasons = [], []
    for b, p in enumerate(prompts):
        out.append([int(t) for t in tokens[b, len(p):length[b]]])
        reasons.append("nonfinite" if nonfinite[b] else "eos" if eos_hit[b] else "length")
    tok = getattr(model, "tokenizer", None)
    text = [tok.decode(t) for t in out] if tok is not None else None
    result = GenerationResult(out, text, [len(p) for p in prompts], reasons, nonfinite,
                              **fields)
    if on_nonfinite == "raise" and nonfinite.any():
        raise NonFiniteLogitsError(
            f"non-finite logits met in rows {np.flatnonzero(nonfinite).tolist()}; those rows "
            f"stopped before the bad step (pass on_nonfinite='report' to get the result)",
            result)
    return result


def _placed(mesh, model, batch, replicated, drafter=None):
    """The program's arguments: as they are without a mesh (one device, the program
    unchanged), else placed on ``mesh`` by `specsim.sharding.place`."""
    if mesh is None:
        return model.params, tuple(jnp.asarray(x) for x in batch), replicated, drafter
    return sharding.place(mesh, model, batch=batch, replicated=replicated, drafter=drafter)


def _check_on_nonfinite(on_nonfinite):
    choice("on_nonfinite", on_nonfinite, ("raise", "report"))


def _seed_key(seed):
    return jax.random.PRNGKey(integer("seed", seed))


def _cache_caps(cfg, drafter=None) -> list[tuple[int, str]]:
    """The bounds on a run's cache length, each named for `plan_shapes`'s error: the
    target's max_seq_len and, with a drafter that has one, the drafter's."""
    caps = [(cfg.max_seq_len, f"max_seq_len of {cfg.name}")]
    if drafter is not None and drafter.max_cache_len() is not None:
        caps.append((int(drafter.max_cache_len()), f"max_seq_len of drafter {drafter.name}"))
    return caps


def meta_fields(plan: ShapePlan, temperature, top_k, top_p, seed, **more) -> dict:
    """The ``meta`` a result carries: its shapes and sampling settings (and ``more``)."""
    return dict(padded_prompt=plan.padded_prompt, cache_len=plan.cache_len, **more,
                temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),
                seed=int(seed))


def _copy(x):
    return x.copy() if isinstance(x, jax.Array) else x


class LoopCall(NamedTuple):
    """A generation loop program (jitted) and the arguments a call runs it with:
    ``program(*args, **static)`` runs it once (its ``start`` and ``dstate`` are donated,
    so once only; `fresh_copy` for another run), ``lower()`` lowers it without running
    it (compile timing, HLO inspection; ``override``: static arguments to change, e.g.
    ``widths``)."""
    program: object
    args: tuple
    static: dict

    def lower(self, **override):
        return self.program.lower(*self.args, **{**self.static, **override})

    def fresh_copy(self) -> "LoopCall":
        """This call with device copies of the arguments its program donates
        (``start``, ``dstate``; the weights are shared), so it can run once more from
        the same state."""
        names = list(inspect.signature(self.program).parameters)
        args = tuple(jax.tree.map(_copy, a) if name in DONATED else a
                     for name, a in zip(names, self.args))
        return self._replace(args=args)


# ---- autoregressive ----------------------------------------------------------------------------
@timed
def generate_autoregressive(model, prompts, max_new_tokens: int, temperature: float = 0.0,
                            top_k: int = 0, top_p: float = 1.0, seed: int = 0, *,
                            eos_token_id="auto", cache_len: int | None = None,
                            on_nonfinite: str = "raise", mesh=None) -> GenerationResult:
    """Sample up to ``max_new_tokens`` per prompt, one target pass per token, in one
    compiled loop. ``prompts``: token-id lists (or strings with a tokenizer), rows may
    differ in length. ``eos_token_id``: "auto" (the config's), None (never stop early)
    or an id. ``cache_len``: KV slots (default: bucketed to need, capped by the model's
    max_seq_len; see `plan_shapes`). ``mesh``: a `specsim.sharding.make_mesh` mesh to
    run the same program on (weights tensor-parallel on "model", the batch on "data");
    None: one device."""
    loop, encoded, plan = autoregressive_setup(
        model, prompts, max_new_tokens, temperature, top_k, top_p, seed,
        eos_token_id=eos_token_id, cache_len=cache_len, on_nonfinite=on_nonfinite, mesh=mesh)
    return autoregressive_result(loop.program(*loop.args, **loop.static), model, encoded,
                                 plan, on_nonfinite, mesh,
                                 meta_fields(plan, temperature, top_k, top_p, seed))


def autoregressive_result(out, model, encoded, plan, on_nonfinite, mesh, meta):
    """The `GenerationResult` of `autoregressive_program`'s output ``out``."""
    common, _ = out
    common = common if mesh is None else sharding.to_host(common)
    n_it = int(common.it)
    return _finish(common, encoded, model, on_nonfinite, n_iterations=n_it,
                   target_passes=n_it + 1, draft_passes=0, plan=plan, meta=meta)


def autoregressive_setup(model, prompts, max_new_tokens: int, temperature: float = 0.0,
                         top_k: int = 0, top_p: float = 1.0, seed: int = 0, *,
                         eos_token_id="auto", cache_len: int | None = None,
                         on_nonfinite: str = "raise", mesh=None):
    """`generate_autoregressive`'s arguments checked, its prefill run: → (the loop
    program's `LoopCall`, the encoded prompts, the `ShapePlan`)."""
    cfg = model.cfg
    max_new = positive_int("max_new_tokens", max_new_tokens)
    sp = SamplingParams.make(temperature, top_k, top_p, vocab_size=cfg.vocab_size)
    _check_on_nonfinite(on_nonfinite)
    key = _seed_key(seed)
    eos = resolve_eos(eos_token_id, cfg)
    encoded = encode_prompts(prompts, model, cfg)
    plan = plan_shapes(encoded, max_new, 0, _cache_caps(cfg), cache_len)
    arr, lens = pad_prompts(encoded, plan.padded_prompt)
    params, (arr, lens), (sp, max_new_a, eos_a, key), _ = _placed(
        mesh, model, (arr, lens), (sp, jnp.int32(max_new), jnp.int32(eos), key))
    start, _ = prefill_program(params, sp, arr, lens, max_new_a, eos_a, key, cfg=cfg,
                               S=plan.cache_len)
    loop = LoopCall(autoregressive_program, (params, sp, lens, max_new_a, eos_a, start),
                    dict(cfg=cfg, S=plan.cache_len, I=plan.iterations))
    return loop, encoded, plan


def autoregressive_loop(model, prompts, max_new_tokens: int, **kwargs) -> LoopCall:
    """The loop program `generate_autoregressive` (same arguments) would run, with its
    arguments, not run: the prefill runs, the loop is left to the caller (time it
    without its prefill against `speculative_loop`'s; ``.lower()`` for its HLO)."""
    return autoregressive_setup(model, prompts, max_new_tokens, **kwargs)[0]


# ---- speculative -------------------------------------------------------------------------------
def as_drafter(drafter, target):
    """``drafter`` checked against ``target``'s vocabulary; a plain `Model` (config +
    params, no `propose`) becomes a small-model draft."""
    if hasattr(drafter, "cfg") and hasattr(drafter, "params") and \
            not hasattr(drafter, "propose"):
        drafter = model_drafter(drafter, target)
    check_drafter(drafter, target.cfg.vocab_size)
    return drafter


def _resolve_policy(k, policy):
    """(K, policy or None): k alone is the fixed-K program; a policy sets K = its
    k_max (k, if also given, must agree)."""
    if policy is None:
        return positive_int("k", 4 if k is None else k), None
    policy = policies.as_policy(policy)
    if k is not None and positive_int("k", k) != policy.k_max:
        raise InvalidArgument(f"k must be None or equal to policy.k_max = {policy.k_max} "
                              f"when a policy is given (got {k!r})")
    return policy.k_max, policy


class SpeculativeRun(NamedTuple):
    """What `generate_speculative` reads after its loop program: the inputs of its result."""
    encoded: list
    plan: ShapePlan
    k: int
    draft_passes_per_iteration: int
    meta: dict


def speculative_setup(target, drafter, prompts, max_new_tokens: int, k: int | None = None,
                      temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                      seed: int = 0, *, eos_token_id="auto", cache_len: int | None = None,
                      on_nonfinite: str = "raise", policy=None, verify_widths="auto",
                      mesh=None) -> tuple[LoopCall, SpeculativeRun]:
    """`generate_speculative` up to its loop program: the checks, the target's prefill
    and the drafter's (both run), and the loop program's call, not run."""
    cfg = target.cfg
    k, policy = _resolve_policy(k, policy)
    if policy is None and not (verify_widths is None or (isinstance(verify_widths, str)
                                                         and verify_widths == "auto")):
        raise InvalidArgument("verify_widths applies to a policy program only (the fixed-K "
                              f"program verifies k + 1 tokens every iteration; got "
                              f"{verify_widths!r} with policy None)")
    widths = None
    if policy is not None:
        widths, policy = policies.program_widths(policy, k, verify_widths)
    max_new = positive_int("max_new_tokens", max_new_tokens)
    sp = SamplingParams.make(temperature, top_k, top_p, vocab_size=cfg.vocab_size)
    _check_on_nonfinite(on_nonfinite)
    drafter = as_drafter(drafter, target)
    if hasattr(drafter, "check_run"):       # a drafter's own eager limits (e.g. instrument)
        drafter.check_run(max_new_tokens=max_new, k=k, temperature=temperature)
    key = _seed_key(seed)
    eos = resolve_eos(eos_token_id, cfg)
    encoded = encode_prompts(prompts, target, cfg)
    plan = plan_shapes(encoded, max_new, k, _cache_caps(cfg, drafter), cache_len)
    arr, lens = pad_prompts(encoded, plan.padded_prompt)
    params, (arr, lens), (sp, max_new_a, eos_a, key), placed_drafter = _placed(
        mesh, target, (arr, lens), (sp, jnp.int32(max_new), jnp.int32(eos), key), drafter)
    S = plan.cache_len
    start, feature = prefill_program(params, sp, arr, lens, max_new_a, eos_a, key, cfg=cfg,
                                     S=S)
    dstate = None
    if policy is None or not primes_late(drafter, policy):
        dstate = drafter_prefill_program(
            placed_drafter, arr, lens, feature if reads_target_hidden(drafter) else None,
            ~start[0].done, S=S)
    shapes = dict(cfg=cfg, S=S, I=plan.iterations)
    if policy is None:
        loop = LoopCall(speculative_program,
                        (params, placed_drafter, sp, lens, max_new_a, eos_a, start, dstate),
                        dict(k=k, **shapes))
    else:
        loop = LoopCall(policy_program, (params, placed_drafter, sp, arr, lens, max_new_a,
                                         eos_a, start, dstate),
                        dict(policy=policy, widths=widths, **shapes))
    meta = meta_fields(plan, temperature, top_k, top_p, seed, k=k, drafter=drafter.name)
    return loop, SpeculativeRun(encoded, plan, k, drafter.passes_per_iteration(k), meta)


def speculative_loop(target, drafter, prompts, max_new_tokens: int, **kwargs) -> LoopCall:
    """The loop program `generate_speculative` (same arguments) would run, with its
    arguments, not run: the prefill programs run, the loop is left to the caller
    (``.lower().compile()`` to time its compile or read its HLO)."""
    return speculative_setup(target, drafter, prompts, max_new_tokens, **kwargs)[0]


@timed
def generate_speculative(target, drafter, prompts, max_new_tokens: int, k: int | None = None,
                         temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
                         seed: int = 0, *, eos_token_id="auto", cache_len: int | None = None,
                         on_nonfinite: str = "raise", policy=None, verify_widths="auto",
                         mesh=None) -> GenerationResult:
    """Speculative decoding of ``prompts`` with ``target`` (a `specsim.models.Model`) and
    ``drafter`` (see `specsim.drafters`; a plain `Model` is used as a small-model draft),
    ``k`` drafts per iteration, in one compiled loop. Exact: greedy verification at
    temperature 0, rejection sampling otherwise, target and draft distributions after
    the same temperature/top-k/top-p processing. Arguments as `generate_autoregressive`
    (with a ``mesh`` the drafter is replicated); the result carries `SpeculativeStats`.

    ``k``: drafts per iteration (default 4). ``policy``: a draft-length policy of
    `specsim.policies` (FixedK, ConfidenceThreshold, Heuristic, Goodput): each row drafts
    its own number of tokens per iteration within a K = policy.k_max buffer, a model
    drafter's loop stops when every row has stopped, and the stats also record each
    row's planned K, the draft confidences and the per-slot accept outcomes. None (the
    default) runs the fixed-K program. ``verify_widths`` (with a policy only): the widths
    at which the policy program compiles its verify pass. ``"auto"`` (the default): with
    a policy that carries its pass costs (Goodput), the fewest widths whose padding costs
    at most 5% per pass by those costs, which Goodput then plans with bucketed
    (`policies.program_widths`); with any other policy every width. None: each of
    1..K+1. A subset holding K+1, e.g. (1, K+1), compiles fewer forward passes and pads a
    verify to the narrowest width that covers the widest proposal (see
    `policies.verify_widths`, and `policies.Costs.bucketed` for the costs Goodput should
    then plan with). Each width is one forward pass more to compile (see
    docs/studies/verify-widths.md)."""
    loop, run = speculative_setup(
        target, drafter, prompts, max_new_tokens, k, temperature, top_k, top_p, seed,
        eos_token_id=eos_token_id, cache_len=cache_len, on_nonfinite=on_nonfinite,
        policy=policy, verify_widths=verify_widths, mesh=mesh)
    return speculative_result(loop.program(*loop.args, **loop.static), loop, run, target,
                              on_nonfinite, mesh)


def speculative_result(out, loop: LoopCall, run: SpeculativeRun, target, on_nonfinite,
                       mesh):
    """The `GenerationResult` of the speculative loop program's output ``out``."""
    policy = loop.static.get("policy")                    # resolved: None is fixed K
    common, stats, pstats = out[:3] if policy is not None else (*out[:2], None)
    if mesh is not None:
        common, stats, pstats = sharding.to_host((common, stats, pstats))
    more = {}
    if pstats is not None:
        widths = np.asarray(pstats.widths)
        more = dict(policy=repr(policy),
                    single_token_target_passes=int(widths[0]),
                    target_passes_by_width=[int(n) for n in widths])
    n_it, k, dp = int(common.it), run.k, run.draft_passes_per_iteration
    extra = {} if pstats is None else dict(
        k_used=np.asarray(pstats.k_used)[:n_it], confidence=np.asarray(pstats.confidence)[:n_it],
        accept_mask=np.asarray(pstats.accept_mask)[:n_it],
        off_judged=np.asarray(pstats.off_judged)[:n_it])
    st = SpeculativeStats(k, np.asarray(stats.accepted)[:n_it], np.asarray(stats.drafted)[:n_it],
                          np.asarray(stats.overlap)[:n_it], **extra)
    # the policy program counts the drafter's prefill in draft_steps (it may skip it)
    passes = n_it * dp + (1 if dp else 0) if pstats is None else int(pstats.draft_steps)
    return _finish(common, run.encoded, target, on_nonfinite, n_iterations=n_it,
                   target_passes=n_it + 1, draft_passes=passes,
                   stats=st, plan=run.plan, meta={**run.meta, **more})
