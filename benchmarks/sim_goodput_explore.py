"""Goodput's exploration bonus (`policies.Goodput(explore=...)`) and its confidence
threshold (`Goodput(p_min=...)`), replayed on recorded traces: the studies behind their
defaults (explore 0.5 until session 16, 0 since: see --study lengths; p_min 0 until session 24, 0.2 since: benchmarks/goodput_positions.py; the loss budget off until session 25, 0.015 since).

    PYTHONPATH=. python benchmarks/sim_goodput_explore.py                     # explore
    PYTHONPATH=. python benchmarks/sim_goodput_explore.py --study confidence  # p_min
    PYTHONPATH=. python benchmarks/sim_goodput_explore.py --study widths      # verify widths
    PYTHONPATH=. python benchmarks/sim_goodput_explore.py --study cost-noise  # pass-time noise
    PYTHONPATH=. python benchmarks/sim_goodput_explore.py --study horizon     # fading bonus
    PYTHONPATH=. python benchmarks/sim_goodput_explore.py --study cost-estimators
    PYTHONPATH=. python benchmarks/sim_goodput_explore.py --study judge-off  # evidence while off
    PYTHONPATH=. python benchmarks/sim_goodput_explore.py --study budget     # conservative
    PYTHONPATH=. python benchmarks/sim_goodput_explore.py --study warm       # carried prior
    PYTHONPATH=. python benchmarks/sim_goodput_explore.py --study lengths --new-tokens 320 \
        --cache-len 512 [--shipped-prompt 1] [--save-traces T.npz]          # run length
    PYTHONPATH=. python benchmarks/sim_goodput_explore.py --study lengths --from-traces \
        data/goodput-studies-cpu/traces_320.npz                              # replay only

Goodput plans from a per-row estimate of per-position acceptance; once it plans K = 0 a
row learns nothing new until the estimate's evidence decays, so after a few early
rejections it can stay off where drafting pays (n-gram lookup at batch 8, full policies
grid before the bonus: 0.92x plain decoding against fixed K 4's 1.42x). With ``explore``
it plans with an upper confidence bound, α̂ + z·sqrt(α̂(1 − α̂) / (n + w)), n the
decayed count of reached slots and w the prior weight, so a row that stopped drafting
grows more optimistic as its evidence decays, and one with much evidence does not.

For each cell (drafter, kind of work, batch): the engine records a FixedK(4) run under
the policy loop (SmolLM2-135M, 40 new tokens by default, ``--new-tokens``, greedy), and every policy is replayed on
that trace (`simulate.simulate_policy`, engine cost model) with pass times measured here
first (`pass_costs`, interleaved rounds: t_target(1), t_verify(K + 1) for K = 1..4 and
t_draft per drafter and batch, as the policies part measures them). Printed: simulated
speedup against plain decoding / fraction of row-iterations at K = 0; then a mixed
batch (two rows of each kind), replayed as the engine's static batch, with Goodput's
three plans (`width`) and its slowest-row plan with less exploration, at 40 and 120 new
tokens (what Goodput spends learning each row's rate is a cost per run).
``--study confidence`` replays instead, on the same traces, the confidence threshold of
the policies part (p_min 0.4) beside Goodput with p_min 0, 0.2, 0.4 and 0.6 (the plan an
upper bound, a draft of confidence <= p_min ending the row's proposal). ``--study
widths`` replays Goodput in a program compiled at every verify width beside one compiled
at (1, 5) and at (1, 3, 5) (`generate_speculative(verify_widths=...)`), each planning
with and charged the padded pass times (`Costs.bucketed`). One run (commit after
e7ec290, the VM in its slow mode, 162 s), speedup against plain decoding, every width /
(1, 5) / (1, 3, 5): n-gram code batch 1 1.59 / 1.65 / 1.59, code batch 8 1.18 / 1.39 /
1.27 (fixed K 4 1.39: at (1, 5) any K > 0 pays the 5-token pass, so Goodput plans K 4
where with every width it planned shorter); feature head code batch 8 1.14 / 0.93 /
0.91 and code batch 1 0.99 / 0.93 / 0.99 (short drafts pay there, and (1, 5) takes them
away); the other cells within 0.03 of each other. Fewer widths are a compile-time
choice, not a better plan. ``--study cost-noise`` asks how much of Goodput's distance
from the best fixed K is the noise of the pass times it plans with: on recorded n-gram
traces (code and json, batch 1 and 8) it replays Goodput charged a known cost curve
(t(n) = 1 + slope·(n − 1), slope 0.03 at batch 1 and 0.11 at batch 8, t_draft 0) while
planning with that curve times lognormal noise of σ 0, 0.03 and 0.08 (40 draws each),
and the same against the curve measured here first, each read as measured, made
non-decreasing (`Costs.nondecreasing`, the policies part's) and fitted to a line
(`Costs.fitted`). ``--study horizon`` replays Goodput with and without its exploration
bonus fading over the run's 40 tokens (`Goodput(horizon=...)`). ``--study judge-off``
replays Goodput with and without judging the n-gram lookup's free first draft in the
iterations it turned itself off (`Goodput(judge_off=...)`). ``--study budget`` replays
Goodput without its loss budget, with the default ε 0.015 and with 0.02
(`Goodput(budget=...)`: a conservative bandit that plans a draft only where the row's
bank, ε of the run's plain-decoding time plus what speculation won, covers the draft's
worst outcome; until session 24 the study compared the bank of the earlier design, see
`specsim.policies`). On a recorded trace the allowance is ε of the trace's iterations
(`simulate_policy`), fewer than the run's tokens, so these replays understate it. ``--study warm``
replays Goodput starting from an acceptance prior carried from earlier runs
(`policies.AcceptancePrior`, ``Goodput(start=...)``), learned from a FixedK(4) run of the
same drafter on WARM_PROMPTS other prompts of the same kind of work (the shipped prompt
set, data/prompts/, which holds none of the evaluation prompts; the mixed batch's prior
pools the four kinds), at full and quarter weight, beside the best fixed K replayed on
the same trace, and counts the cells that miss the issue's two goals. ``--study
cost-estimators`` times the pass calls in 20 interleaved rounds (the first a warm-up)
and shows how steady each
estimate of t(n) / t(1) is over bootstrap sets of 7 rounds (the policies part's
pre-rounds): a ratio of medians against ratios paired within a round. The replay
missed measured speedups by 5–10% on average in the full policies grids, so read the
differences, not the third digit. (The numbers above, 0.92x and 1.42x, are from a grid
that verified K_max + 1 positions in every iteration.)
"""

from __future__ import annotations

import argparse

import numpy as np

from specsim import decode, experiment, models, simulate
from specsim import policies as P
from specsim.drafters import (NGramDrafter, off_draft, feature_head_drafter,
                              layer_skip_drafter)
from specsim.experiment.drafter_study import find_feature_head
from specsim.experiment.pipeline import encode_prompts
from specsim.experiment.policy_runs import costs_from_passes, trace_from_stats


CELLS = [("ngram", "code", 1), ("ngram", "extraction", 1), ("ngram", "json", 1),
         ("ngram", "prose", 1), ("ngram", "code", 8), ("ngram", "json", 8),
         ("layer-skip", "code", 1), ("layer-skip", "code", 8), ("feature-head", "code", 1),
         ("feature-head", "extraction", 1), ("feature-head", "code", 8)]
K_MAX, CACHE = 4, 384
MIXED_TOKENS = (40, 120)     # Goodput's cost of learning is per run: read it at two lengths


def pass_call_list(target, drafters, batches) -> tuple[list, list]:
    """(calls, keys) of the policies part's pass programs, 4 passes per call: keys
    ("verify", batch, k) for k = 1..K_MAX, ("target_1", batch) and, for each drafter that
    computes, ("draft", name, batch) (K_MAX draft steps per pass)."""
    from specsim import pass_costs

    calls, keys = [], []
    for batch in batches:
        for k in range(1, K_MAX + 1):
            c = pass_costs.pass_calls(target, None, batch=batch, cache_len=CACHE, k=k, steps=4)
            calls.append(c.verify)
            keys.append(("verify", batch, k))
        calls.append(c.target_1)
        keys.append(("target_1", batch))
        for name, d in drafters.items():
            if d.passes_per_iteration(K_MAX):
                c = pass_costs.pass_calls(target, d, batch=batch, cache_len=CACHE, k=K_MAX,
                                          steps=4)
                calls.append(c.draft)
                keys.append(("draft", name, batch))
    return calls, keys


def measure_costs(target, drafters, batches, rounds: int = 5) -> dict:
    """(drafter, batch) -> Costs, each pass timed in the same interleaved rounds."""
    from specsim import bench

    calls, keys = pass_call_list(target, drafters, batches)
    samples, _ = bench.interleaved_rounds(calls, rounds, np.random.default_rng(0), warmup=1)
    per = {key: float(np.median(s)) / 4 for key, s in zip(keys, samples)}
    for key in keys:
        if key[0] == "draft":
            per[key] /= K_MAX                                          # K_MAX steps per call
    return {(name, b): costs_from_passes(
        per[("target_1", b)], {k: per[("verify", b, k)] for k in range(1, K_MAX + 1)},
        per.get(("draft", name, b), 0.0), K_MAX) for name in drafters for b in batches}


STUDIES = {
    "horizon": (["goodput", "goodput horizon 40"],
                lambda costs: [P.Goodput(k_max=K_MAX, costs=costs),
                               P.Goodput(k_max=K_MAX, costs=costs, horizon=40)]),
    "explore": (["explore 0", "explore 0.5", "explore 1", "explore 2"],
                lambda costs: [P.Goodput(k_max=K_MAX, costs=costs, explore=z)
                               for z in (0.0, 0.5, 1.0, 2.0)]),
    "confidence": (["threshold 0.4", "goodput", "goodput p_min 0.2", "goodput p_min 0.4",
                    "goodput p_min 0.6"],
                   lambda costs: [P.ConfidenceThreshold(p_min=0.4, k_max=K_MAX)] + [
                       P.Goodput(k_max=K_MAX, costs=costs, p_min=p)
                       for p in (0.0, 0.2, 0.4, 0.6)]),
    "judge-off": (["goodput", "goodput judge_off False"],
                  lambda costs: [P.Goodput(k_max=K_MAX, costs=costs),
                                 P.Goodput(k_max=K_MAX, costs=costs, judge_off=False)]),
    "budget": (["goodput budget off", "goodput (budget 0.015)", "goodput budget 0.02"],
               lambda costs: [P.Goodput(k_max=K_MAX, costs=costs, budget=b)
                              for b in (None, 0.015, 0.02)]),
    "widths": (["goodput", "goodput widths (1, 5)", "goodput widths (1, 3, 5)"],
               lambda costs: [P.Goodput(k_max=K_MAX, costs=costs.bucketed(w))
                              for w in (None, (1, K_MAX + 1), (1, 3, K_MAX + 1))]),
}


PLAN_READS = {"as measured": lambda c: c, "nondecreasing": P.Costs.nondecreasing,
              "fitted line": P.Costs.fitted}
"""How Goodput reads its noisy pass times in --study cost-noise (`policies.Costs`)."""


def cost_noise(target, prompts, draws: int = 40) -> None:
    """Goodput planning with noisy pass times, charged the true ones (see --study): the
    true curves are a line (t(n) = 1 + slope·(n − 1)) and the curve measured here first
    (`measure_costs`, made non-decreasing), each read as measured, made non-decreasing
    and fitted to a line (`PLAN_READS`)."""
    drafter = NGramDrafter(target.cfg.vocab_size, n=3)
    measured = measure_costs(target, {"ngram": drafter}, [1, 8], rounds=7)
    rng = np.random.default_rng(0)
    sigmas = (0.0, 0.03, 0.08)
    print("| kind | batch | true curve | plan reads | best fixed K | " + " | ".join(
        f"goodput σ {s} mean / worst" for s in sigmas) + " |")
    print("|---|---|---|---|---|" + "---|" * len(sigmas))
    for kind in ("code", "json"):
        for batch, slope in ((1, 0.03), (8, 0.11)):
            stats = decode.generate_speculative(target, drafter, [prompts[kind]] * batch, 40,
                                                policy=P.FixedK(k=K_MAX), cache_len=CACHE).stats
            trace = trace_from_stats(stats)
            m = measured[("ngram", batch)].nondecreasing()
            curves = {"line": P.Costs.from_ratio(0.0, K_MAX, verify_slope=slope),
                      "measured": P.Costs(t_draft=0.0, t_target=tuple(
                          np.asarray(m.t_target) / m.t_target[0]))}
            for curve, true in curves.items():
                best = max(simulate.simulate_policy(P.FixedK(k=k), trace, costs=true,
                                                    cost_model="engine").speedup
                           for k in range(1, K_MAX + 1))
                noise = {s: [np.exp(rng.normal(0, s, K_MAX + 1)) for _ in range(draws if s else 1)]
                         for s in sigmas}
                for read, how in PLAN_READS.items():
                    cells = []
                    for sigma in sigmas:
                        got = [simulate.simulate_policy(
                            P.Goodput(k_max=K_MAX, costs=how(P.Costs(
                                t_draft=0.0, t_target=np.asarray(true.t_target) * z))),
                            trace, costs=true, cost_model="engine",
                            off_draft="free").speedup / best
                            for z in noise[sigma]]
                        cells.append(f"{np.mean(got):.3f} / {np.min(got):.3f}")
                    print(f"| {kind} | {batch} | {curve} | {read} | {best:.2f} | "
                          + " | ".join(cells) + " |", flush=True)


ESTIMATORS = {
    "ratio of medians": lambda x, ref: np.median(x) / np.median(ref),
    "median of paired ratios": lambda x, ref: np.median(x / ref),
    "geometric mean of paired ratios": lambda x, ref: np.exp(np.mean(np.log(x / ref))),
    "ratio of minima": lambda x, ref: np.min(x) / np.min(ref),
}


def cost_estimators(target, rounds: int = 20, subset: int = 7, draws: int = 2000) -> None:
    """How steady each estimate of t(n) / t(1) is: the pass calls of the policies part
    (batch 1 and 8) timed in ``rounds`` interleaved rounds, then each estimator over
    ``draws`` bootstrap sets of ``subset`` rounds (the policies part's PRE_ROUNDS)."""
    from specsim import bench

    calls, keys = pass_call_list(target, {}, (1, 8))
    samples, _ = bench.interleaved_rounds(calls, rounds, np.random.default_rng(0), warmup=1)
    width = {key: 1 if key[0] == "target_1" else key[2] + 1 for key in keys}  # tokens/pass
    times = {(key[1], width[key]): np.asarray(s, float) for key, s in zip(keys, samples)}
    rng = np.random.default_rng(1)
    n = len(next(iter(times.values())))
    sets = [rng.choice(n, subset, replace=True) for _ in range(draws)]
    print(f"{n} rounds; sd of each estimate of t(n)/t(1) over {draws} bootstrap sets of "
          f"{subset} rounds (all rounds' estimate in brackets)")
    print("| batch | n | " + " | ".join(ESTIMATORS) + " |")
    print("|---|---|" + "---|" * len(ESTIMATORS))
    for batch in (1, 8):
        ref = times[(batch, 1)]
        for width in range(2, K_MAX + 2):
            x = times[(batch, width)]
            cells = [f"{np.std([f(x[i], ref[i]) for i in sets]):.3f} ({f(x, ref):.2f})"
                     for f in ESTIMATORS.values()]
            print(f"| {batch} | {width} | " + " | ".join(cells) + " |", flush=True)


KINDS = ("code", "extraction", "json", "prose")


def shipped_by_kind() -> dict:
    """kind -> the shipped prompt set's prompts of that kind (data/prompts/), in order."""
    from specsim.train.samples import load_prompts

    pool = load_prompts()
    return {kind: [p for p in pool if p["kind"] == kind] for kind in KINDS}


def mixed_rows(prompts: dict) -> list:
    """The mixed batch of 8: two rows of each kind of work."""
    return [prompts[k] for k in KINDS] * 2


def all_cells(drafters) -> list:
    """CELLS and, for each drafter, the mixed batch of 8."""
    return list(CELLS) + [(n, "mixed", 8) for n in drafters]


def shipped_prompts(target, index: int) -> dict:
    """kind -> the ``index``-th prompt of that kind in the shipped set (data/prompts/),
    encoded: prompts none of the studies' evaluation prompts are."""
    from specsim.train.samples import encode_prompts as encode_set

    out = {}
    for kind, these in shipped_by_kind().items():
        if not 0 <= index < len(these):
            raise SystemExit(f"--shipped-prompt must be in 0..{len(these) - 1} for {kind} "
                             f"(got {index})")
        out[kind] = encode_set([these[index]], target.tokenizer)[0]
    return out


WARM_PROMPTS = 4
"""Prompts of each kind (from the shipped set) an acceptance prior is learned from."""
WARM_WEIGHTS = (1.0, 0.25)


def warm_priors(target, drafters, new_tokens: int) -> dict:
    """(drafter, kind) -> `policies.AcceptancePrior` from a FixedK(K_MAX) run on
    WARM_PROMPTS prompts of that kind from data/prompts/ (evenly spaced through the
    set), at each of WARM_WEIGHTS: (drafter, kind, weight) keys; kind "mixed" pools the
    four kinds (the mean of their counts)."""
    from specsim.train.samples import encode_prompts as encode_set

    by_kind = shipped_by_kind()
    out = {}
    for name, drafter in drafters.items():
        for kind, these in by_kind.items():
            chosen = these[::len(these) // WARM_PROMPTS][:WARM_PROMPTS]
            stats = decode.generate_speculative(
                target, drafter, encode_set(chosen, target.tokenizer), new_tokens,
                policy=P.FixedK(k=K_MAX), cache_len=CACHE).stats
            trace = trace_from_stats(stats)
            for w in WARM_WEIGHTS:
                out[(name, kind, w)] = P.AcceptancePrior.from_trace(trace, K_MAX, weight=w)
        for w in WARM_WEIGHTS:
            kinds = [out[(name, k, w)] for k in KINDS]
            out[(name, "mixed", w)] = P.AcceptancePrior(
                accepted=tuple(np.mean([p.accepted for p in kinds], 0)),
                reached=tuple(np.mean([p.reached for p in kinds], 0)))
        print(f"{name}: prior rates " + ", ".join(
            f"{k} {np.round(out[(name, k, 1.0)].rates(), 2).tolist()}"
            for k in KINDS + ("mixed",)), flush=True)
    return out


def warm(target, prompts, drafters, costs_of, new_tokens: int) -> None:
    """Goodput cold and warm (see --study warm) against plain decoding and the best
    fixed K on each cell's trace and on the mixed batch; then the count of cells that
    miss "never more than 2% slower than plain decoding" and "within 3% of the best
    fixed K or above it"."""
    priors = warm_priors(target, drafters, new_tokens)
    free = {name: off_draft(d) for name, d in drafters.items()}
    mixed = mixed_rows(prompts)
    cells = all_cells(drafters)
    labels = ["goodput"] + [f"goodput warm {w}" for w in WARM_WEIGHTS]
    misses = {lab: [0, 0] for lab in labels}
    print("| drafter | kind | batch | best fixed K | " + " | ".join(labels) + " |")
    print("|---|---|---|---|" + "---|" * len(labels))
    for name, kind, batch in cells:
        rows = mixed if kind == "mixed" else [prompts[kind]] * batch
        stats = decode.generate_speculative(target, drafters[name], rows, new_tokens,
                                            policy=P.FixedK(k=K_MAX), cache_len=CACHE).stats
        trace, costs = trace_from_stats(stats), costs_of[(name, batch)]

        def replay(policy):
            return simulate.simulate_policy(policy, trace, costs=costs, cost_model="engine",
                                            off_draft=free[name])
        fixed = {k: replay(P.FixedK(k=k)).speedup for k in range(1, K_MAX + 1)}
        best_k = max(fixed, key=fixed.get)
        policies = [P.Goodput(k_max=K_MAX, costs=costs)] + [
            P.Goodput(k_max=K_MAX, costs=costs, start=priors[(name, kind, w)])
            for w in WARM_WEIGHTS]
        out = []
        for lab, policy in zip(labels, policies):
            r = replay(policy)
            misses[lab][0] += r.speedup < 0.98
            misses[lab][1] += r.speedup < 0.97 * fixed[best_k]
            out.append(f"{r.speedup:.2f} / {np.mean(r.k_plan[r.present] == 0):.2f}")
        print(f"| {name} | {kind} | {batch} | {fixed[best_k]:.2f} (K {best_k}) | "
              + " | ".join(out) + " |", flush=True)
    print(f"\ncells ({len(cells)}) below 0.98x plain decoding / below 0.97x the best fixed K: "
          + ", ".join(f"{lab} {a} / {b}" for lab, (a, b) in misses.items()))


LENGTHS = (40, 80, 160, 320)
"""--study lengths: the run lengths (new tokens) at which the goals are counted."""


def prefix(trace: simulate.AcceptanceTrace, n: int) -> simulate.AcceptanceTrace:
    """The first ``n`` iterations of ``trace``: a shorter run under the replay's own
    assumption (iteration i meets the same slots whatever was planned before it)."""
    return simulate.AcceptanceTrace(trace.accept[:n], trace.confidence[:n], trace.present[:n])


def iterations_for(stats, new_tokens: int) -> int:
    """Iterations the recorded run took until its rows had ``new_tokens`` each on
    average (a row's tokens per iteration: its accepted drafts + 1 while present)."""
    acc = np.asarray(stats.accepted)                                       # [I, B], -1 absent
    per_row = np.cumsum(np.where(acc >= 0, acc + 1, 0), axis=0).mean(axis=1)   # [I]
    return int(min(np.searchsorted(per_row, new_tokens) + 1, len(per_row)))


LENGTH_POLICIES = {
    "goodput": lambda costs: P.Goodput(k_max=K_MAX, costs=costs),
    "goodput budget off": lambda costs: P.Goodput(k_max=K_MAX, costs=costs, budget=None),
    "goodput prior 0.6 explore 0.5": lambda costs: P.Goodput(k_max=K_MAX, costs=costs,
                                                             prior_alpha=0.6, explore=0.5,
                                                             budget=None),
}
"""--study lengths: Goodput with today's defaults, without its loss budget (the default
before session 25), and with the defaults before session 16."""


def lengths(target, prompts, drafters, costs_of, new_tokens: int, save=None) -> None:
    """Record each cell's FixedK(K_MAX) trace at ``new_tokens``, then `replay_lengths`.
    ``save``: a .npz path for every cell's trace, its iterations per length and its pass
    times, so the replays can be run again without the model (``--from-traces``)."""
    free = {name: off_draft(d) for name, d in drafters.items()}
    mixed = mixed_rows(prompts)
    cells = all_cells(drafters)
    lens = [n for n in LENGTHS if n <= new_tokens]
    recorded = {}
    for name, kind, batch in cells:
        rows = mixed if kind == "mixed" else [prompts[kind]] * batch
        stats = decode.generate_speculative(target, drafters[name], rows, new_tokens,
                                            policy=P.FixedK(k=K_MAX), cache_len=CACHE).stats
        cut = tuple(iterations_for(stats, n) for n in lens)
        recorded[(name, kind, batch)] = (trace_from_stats(stats), cut, costs_of[(name, batch)],
                                         free[name])
    if save:
        save_traces(save, recorded, lens)
    replay_lengths(recorded, tuple(lens))


def replay_lengths(recorded: dict, lens: tuple) -> None:
    """Each policy of LENGTH_POLICIES against plain decoding and the best fixed K on
    prefixes of each cell's trace (see --study lengths), then, per policy and length,
    the count of cells that miss "never more than 2% slower than plain decoding" and
    "within 3% of the best fixed K". ``recorded``: (drafter, kind, batch) -> (trace,
    iterations per length, Costs, off_draft), as `load_traces` gives."""
    labels = list(LENGTH_POLICIES)
    misses = {lab: {n: [0, 0] for n in lens} for lab in labels}
    print("Each entry: best fixed K (its K) / " + " / ".join(labels) + "; ! below 0.98x "
          "plain decoding, ? below 0.97x the best fixed K\n")
    print("| drafter | kind | batch | " + " | ".join(f"{n} tokens" for n in lens) + " |")
    print("|---|---|---|" + "---|" * len(lens))
    for (name, kind, batch), (whole, cut, costs, free) in recorded.items():
        out = []
        for n, i in zip(lens, cut):
            trace = prefix(whole, i)

            def replay(policy):     # a budget's allowance: the prefix's iterations
                return simulate.simulate_policy(policy, trace, costs=costs,
                                                cost_model="engine", off_draft=free).speedup
            fixed = {k: replay(P.FixedK(k=k)) for k in range(1, K_MAX + 1)}
            best_k = max(fixed, key=fixed.get)
            entry = f"{fixed[best_k]:.2f} (K {best_k})"
            for lab in labels:
                g = replay(LENGTH_POLICIES[lab](costs))
                low, far = g < 0.98, g < 0.97 * fixed[best_k]
                misses[lab][n][0] += low
                misses[lab][n][1] += far
                entry += f" / {g:.2f}" + "!" * low + "?" * far
            out.append(entry)
        print(f"| {name} | {kind} | {batch} | " + " | ".join(out) + " |", flush=True)
    print(f"\ncells ({len(recorded)}) below 0.98x plain decoding / below 0.97x the best fixed "
          "K, by run length:")
    for lab in labels:
        print(f"- {lab}: " + ", ".join(f"{n} tokens {a} / {b}"
                                      for n, (a, b) in misses[lab].items()))


def save_traces(path, recorded: dict, lens) -> None:
    """Write what `replay_lengths` reads (see `load_traces`, its inverse) to ``path``."""
    arrays = {"lengths": np.asarray(lens)}
    for (name, kind, batch), (trace, cut, costs, free) in recorded.items():
        cell = f"{name}|{kind}|{batch}|{free}"
        arrays.update({f"{cell}|accept": trace.accept, f"{cell}|confidence": trace.confidence,
                       f"{cell}|present": trace.present, f"{cell}|cut": np.asarray(cut),
                       f"{cell}|t_target": np.asarray(costs.t_target),
                       f"{cell}|t_draft": np.asarray(costs.t_draft)})
    np.savez_compressed(path, **arrays)


def load_traces(path) -> dict:
    """(drafter, kind, batch) -> (AcceptanceTrace, iterations per length, Costs, the
    drafter's `off_draft`) from a --save-traces file; the lengths under the key
    "lengths". Files written before `off_draft` hold 1 / 0 (free drafts or not)."""
    z = np.load(path)
    out = {"lengths": tuple(int(n) for n in z["lengths"])}
    for key in z.files:
        if key.endswith("|accept"):
            cell = key[:-len("|accept")]
            name, kind, batch, free = cell.split("|")
            trace = simulate.AcceptanceTrace(z[f"{cell}|accept"], z[f"{cell}|confidence"],
                                             z[f"{cell}|present"])
            costs = P.Costs(t_draft=float(z[f"{cell}|t_draft"]),
                            t_target=tuple(map(float, z[f"{cell}|t_target"])))
            out[(name, kind, int(batch))] = (trace, tuple(map(int, z[f"{cell}|cut"])), costs,
                                             {"0": "none", "1": "free"}.get(free, free))
    return out


def main(argv=None) -> None:
    global CACHE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", choices=sorted(STUDIES) + ["cost-noise", "cost-estimators",
                                                         "warm", "lengths"],
                    default="explore")
    ap.add_argument("--new-tokens", type=int, default=40,
                    help="new tokens of each cell's recorded run (the mixed batch reads "
                         f"{MIXED_TOKENS}; --study lengths records this many and replays "
                         f"prefixes of {LENGTHS} up to it)")
    ap.add_argument("--shipped-prompt", type=int, default=None, metavar="I",
                    help="use the I-th prompt of each kind from the shipped set (data/prompts/) "
                         "instead of the evaluation prompts: a held-out set for the replays")
    ap.add_argument("--from-traces", default=None, metavar="NPZ",
                    help="--study lengths: replay a --save-traces file (no model, seconds)")
    ap.add_argument("--save-traces", default=None, metavar="NPZ",
                    help="--study lengths: write each cell's trace and pass times here")
    ap.add_argument("--cache-len", type=int, default=CACHE,
                    help="KV slots of every recorded run and timed pass (default %(default)s; "
                         "--study lengths at 320 tokens needs 512)")
    args = ap.parse_args(argv)
    CACHE = args.cache_len
    for opt, given in (("--from-traces", args.from_traces), ("--save-traces", args.save_traces)):
        if given and args.study != "lengths":
            raise SystemExit(f"{opt} goes with --study lengths (got --study {args.study})")
    if args.from_traces:
        recorded = load_traces(args.from_traces)
        return replay_lengths(recorded, recorded.pop("lengths"))
    target = models.load("smollm2-135m").with_layer_loop("scan")
    if args.study == "cost-estimators":
        return cost_estimators(target)
    prompts = (encode_prompts(target, list(KINDS)) if args.shipped_prompt is None
               else shipped_prompts(target, args.shipped_prompt))
    if args.study == "cost-noise":
        return cost_noise(target, prompts)
    drafters = {"ngram": NGramDrafter(target.cfg.vocab_size, n=3),
                "layer-skip": layer_skip_drafter(
                    target, experiment.default_layer_skip(target.cfg.n_layers)),
                "feature-head": feature_head_drafter(target, find_feature_head(target.cfg.name))}
    costs_of = measure_costs(target, drafters, sorted({b for _, _, b in CELLS}))
    if args.study == "warm":
        return warm(target, prompts, drafters, costs_of, args.new_tokens)
    if args.study == "lengths":
        return lengths(target, prompts, drafters, costs_of, args.new_tokens, args.save_traces)
    labels, make = STUDIES[args.study]
    free = {name: off_draft(d) for name, d in drafters.items()}
    print("| drafter | kind | batch | fixed K 4 | " + " | ".join(labels) + " |")
    print("|---|---|---|---|" + "---|" * len(labels))
    for name, kind, batch in CELLS:
        stats = decode.generate_speculative(target, drafters[name], [prompts[kind]] * batch,
                                            args.new_tokens,
                                            policy=P.FixedK(k=K_MAX), cache_len=CACHE).stats
        trace = trace_from_stats(stats)
        costs = costs_of[(name, batch)]
        policies = [P.FixedK(k=K_MAX)] + make(costs)
        cells = []
        for policy in policies:       # a Goodput is charged the (padded) costs it plans with
            charged = policy.costs if isinstance(policy, P.Goodput) else costs
            r = simulate.simulate_policy(policy, trace, costs=charged, cost_model="engine",
                                         off_draft=free[name])
            cells.append(f"{r.speedup:.2f} / {np.mean(r.k_plan[r.present] == 0):.2f}")
        print(f"| {name} | {kind} | {batch} | " + " | ".join(cells) + " |", flush=True)
    if args.study not in ("explore", "judge-off", "budget"):
        return
    # a mixed batch (two rows of each kind of work), replayed as the engine's static
    # batch: Goodput's three plans (one K for the batch at the slowest row's pace, or
    # for the sum over rows; each row's own), all paying the widest row's verify, and
    # the slowest-row plan with less exploration
    mixed = mixed_rows(prompts)
    plans = {"fixed K 4": lambda c: P.FixedK(k=K_MAX),
             "shared": lambda c: P.Goodput(k_max=K_MAX, costs=c, width="shared"),
             "per-row": lambda c: P.Goodput(k_max=K_MAX, costs=c, width="per-row"),
             "slowest": lambda c: P.Goodput(k_max=K_MAX, costs=c),
             "slowest explore 0.25": lambda c: P.Goodput(k_max=K_MAX, costs=c, explore=0.25),
             "slowest explore 0": lambda c: P.Goodput(k_max=K_MAX, costs=c, explore=0.0)}
    if args.study == "budget":
        plans = {"fixed K 4": lambda c: P.FixedK(k=K_MAX),
                 "goodput budget off": lambda c: P.Goodput(k_max=K_MAX, costs=c, budget=None),
                 "goodput (budget 0.015)": lambda c: P.Goodput(k_max=K_MAX, costs=c),
                 "goodput budget 0.02": lambda c: P.Goodput(k_max=K_MAX, costs=c, budget=0.02)}
    if args.study == "judge-off":
        plans = {"fixed K 4": lambda c: P.FixedK(k=K_MAX),
                 "goodput": lambda c: P.Goodput(k_max=K_MAX, costs=c),
                 "goodput judge_off False": lambda c: P.Goodput(k_max=K_MAX, costs=c,
                                                                judge_off=False)}
    print("\n| drafter | mixed batch 8, new tokens | " + " | ".join(plans) + " |")
    print("|---|---|" + "---|" * len(plans))
    for name in drafters:
        for new_tokens in MIXED_TOKENS:
            stats = decode.generate_speculative(target, drafters[name], mixed, new_tokens,
                                                policy=P.FixedK(k=K_MAX),
                                                cache_len=CACHE).stats
            trace, costs = trace_from_stats(stats), costs_of[(name, 8)]
            cells = [simulate.simulate_policy(make_plan(costs), trace, costs=costs,
                                              cost_model="engine",
                                              off_draft=free[name]).speedup
                     for make_plan in plans.values()]
            print(f"| {name} | {new_tokens} | " + " | ".join(f"{c:.2f}" for c in cells) + " |",
                  flush=True)


if __name__ == "__main__":
    main()
