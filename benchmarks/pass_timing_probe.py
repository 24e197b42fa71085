"""How the demo's pass programs should be timed beside the loops they predict.

Probes on the default target (SmolLM2-135M); all but ``sweep`` on the instrument
drafter at batch 1, K 4, 40 new tokens from a 28-token prompt (the default demo's
instrument group):

* ``context``: the one-token pass program at several contexts against the loop's own
  decode step (its plain-decoding loop over the decode tokens), interleaved rounds;
  the mean and 95% interval of 100 ln(pass / step) per context.
* ``sets``: per round, the plain loop and three speculative runs (α 0.5, 0.7, 0.9,
  8 draft layers) with the pass programs in each order and call length of `DESIGNS`;
  the standard deviation over rounds of the measured ln(T_AR / T_spec), of the
  prediction's cost ratio ln(t1 / t_iteration), and of their difference; and the mean,
  with its 95% interval over rounds, of the in-run error's two terms (the one-token pass
  against the loop's step, the loop's iteration against the iteration pass).
* ``pairing``: how much of a round's swing the baseline and the runs share, and the
  bootstrap spread of the measured speedup as a ratio of raw medians and in baseline
  units (`specsim.experiment.inrun.in_baseline_units`).
* ``sweep``: the pass sweep (the prediction before the run's pass times) in a random
  order of all its calls each round against one block of paired rounds per cell, as
  `specsim.experiment.pass_sweep.sweep` runs it: the spread over repeated sweeps of
  each verify pass over the decode step.
* ``steps``: a per-call fixed cost: the one-token program at 1, 2, 4, 8 and 16 steps a
  call and the plain loop at two lengths, interleaved; per round a line time = fixed +
  steps · step for each, and each call length's step against the loop's (both clocks).

    python benchmarks/pass_timing_probe.py context --rounds 30
    python benchmarks/pass_timing_probe.py sets --rounds 20
    python benchmarks/pass_timing_probe.py sets --rounds 20 --designs around around-8 eight-sets
    python benchmarks/pass_timing_probe.py steps --rounds 30
    python benchmarks/pass_timing_probe.py pairing --rounds 24
    python benchmarks/pass_timing_probe.py sweep --rounds 5

docs/studies/pass-cost-programs.md and docs/studies/timing-design.md quote them.
Process CPU time, as the demo's default clock.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _setup(alphas, cost):
    from specsim.experiment import inrun, pipeline
    from specsim.experiment.parts import instrument
    from specsim.experiment.settings import DemoSettings

    s = DemoSettings(max_new_tokens=40, prompt_tokens=28)
    state = pipeline.prepare(s, progress=False)
    group = instrument.instrument_group(state, 1, alphas, (4,), (cost,))
    return state, group, inrun


def _timed(call) -> float:
    """Process CPU seconds of one call (its ``prepare`` untimed)."""
    return _timed_both(call)[1]


def _timed_both(call) -> tuple[float, float]:
    """(wall, process CPU) seconds of one call, its ``prepare`` run untimed before it."""
    import jax

    if hasattr(call, "prepare"):
        call.prepare()
    w0, c0 = time.perf_counter(), time.process_time()
    jax.block_until_ready(call())
    return time.perf_counter() - w0, time.process_time() - c0


def context_probe(rounds: int) -> None:
    import jax
    from specsim import pass_costs

    state, g, inrun = _setup((0.7,), 0.0)
    run, S, n = g.runs[0], g.cache_len, g.max_new_tokens - 1
    ar = inrun._staged(state.target, None, run.rows, g, 0, g.max_new_tokens)
    jax.block_until_ready(ar())
    ctxs = sorted({16, inrun.loop_context(g), S // 2, 100})
    calls = {c: pass_costs.pass_calls(state.target, None, batch=1, cache_len=S, k=4, steps=4,
                                      pieces=("target_1",), context=c).target_1 for c in ctxs}
    rng = np.random.default_rng(0)
    loop, t1 = [], {c: [] for c in ctxs}
    for _ in range(rounds):
        loop.append(_timed(ar))
        for i in rng.permutation(len(ctxs)):
            t1[ctxs[i]].append(_timed(calls[ctxs[i]]))
    step = np.asarray(loop) / n
    print(f"cache {S} slots, prompt {len(run.rows[0])}, {n} decode steps, {rounds} rounds")
    for c in ctxs:
        x = 100 * np.log(np.asarray(t1[c]) / 4 / step)
        print(f"  context {c:4d}: pass / loop step {x.mean():+.2f}% "
              f"± {1.96 * x.std(ddof=1) / np.sqrt(rounds):.2f}")


DESIGNS = {"after": ("A012P", 4),
           "each": ("AP0P1P2P", 4),
           "around": ("PPA012PP", 4),
           "around-8": ("PPA012PP", 8),
           "eight-sets": ("PPPPA012PPPP", 4),
           "t1-after-t1": ("A012TTTTIIII", 4),
           "t1-after-iteration": ("A012ITITITIT", 4)}
"""Orders of one round (A the plain loop, 0-2 the speculative runs, P a pass set: T the
one-token program, V the verify pass, I the iteration program) and the steps of each
pass call: one set after the loops; a set after each loop; two sets before the loops
and two after (at 4 or 8 steps a call); four before and four after; and the one-token
program after itself or after the iteration program (where a neighbour's traces in the
caches would show)."""


PIECE = {"T": "target_1", "V": "verify", "I": "iteration"}


def _mean_ci(x) -> str:
    x = np.asarray(x, float)
    return f"{x.mean():+.2f} ± {1.96 * x.std(ddof=1) / np.sqrt(x.size):.2f}"


def sets_probe(rounds: int, designs: list[str]) -> None:
    from specsim import pass_costs

    state, g, inrun = _setup((0.5, 0.7, 0.9), 0.25)
    n = g.max_new_tokens - 1                          # the loops' decode steps
    pc = {steps: pass_costs.pass_calls(state.target, g.runs[0].drafter, batch=1,
                                       cache_len=g.cache_len, k=4, steps=steps,
                                       pieces=("target_1", "verify", "iteration"),
                                       context=inrun.loop_context(g))
          for steps in sorted({DESIGNS[d][1] for d in designs})}
    ar = inrun._staged(state.target, None, g.runs[0].rows, g, 0, g.max_new_tokens)
    specs = [inrun._staged(state.target, r, r.rows, g, 0, g.max_new_tokens) for r in g.runs]
    iters = []
    for c in specs:
        c.prepare()
        iters.append(c.result(c()).n_iterations)
    for c in (ar, *specs, *(getattr(calls, piece) for calls in pc.values()
                            for piece in ("target_1", "verify", "iteration"))):
        _timed(c)                                   # compiled and warm before round one
    rng = np.random.default_rng(0)
    got = {d: {"ar": [], "spec": [], "t1": [], "it": []} for d in designs}
    for _ in range(rounds):
        for d in rng.permutation(designs):          # the designs in a fresh order
            spec, t1, it = [0.0] * len(specs), [], []
            order, steps = DESIGNS[d]
            for ch in order:
                if ch == "A":
                    got[d]["ar"].append(_timed(ar))
                elif ch in "PTVI":
                    for piece in ("TVI" if ch == "P" else ch):
                        t = _timed(getattr(pc[steps], PIECE[piece])) / steps
                        if piece == "T":
                            t1.append(t)
                        elif piece == "I":
                            it.append(t)
                else:
                    spec[int(ch)] = _timed(specs[int(ch)])
            got[d]["spec"].append(spec)
            got[d]["t1"].append(np.mean(t1))
            got[d]["it"].append(np.mean(it))
    sd = lambda x: 100 * float(np.std(x, ddof=1))
    print(f"{rounds} rounds; standard deviation over rounds (per cent); mean and 95% "
          f"interval over rounds of the cost term 100 ln(t1 pass / loop step) and the "
          f"overhead term 100 ln(loop iteration / iteration pass), mean over the runs")
    for d in designs:
        v = got[d]
        a, sp = np.asarray(v["ar"]), np.asarray(v["spec"])                   # [R], [R, 3]
        t1, it = np.asarray(v["t1"]), np.asarray(v["it"])
        measured = np.log(a[:, None] / sp)
        pred = np.log(t1 / it)
        m = np.mean([sd(measured[:, j]) for j in range(len(specs))])
        gap = np.mean([sd(pred - measured[:, j]) for j in range(len(specs))])
        cost = 100 * np.log(t1 / (a / n))
        overhead = 100 * np.mean(np.log(sp / np.asarray(iters) / it[:, None]), axis=1)
        print(f"  {d} {DESIGNS[d]}: measured speedup {m:.2f}, prediction's cost ratio "
              f"{sd(pred):.2f}, their difference {gap:.2f}; cost term {_mean_ci(cost)}, "
              f"overhead term {_mean_ci(overhead)}")


def _line_fit(x, y):
    """Least squares y = a + b x over rounds: per round (a, b)."""
    x = np.asarray(x, float)
    A = np.stack([np.ones_like(x), x], 1)
    return np.linalg.lstsq(A, np.asarray(y, float), rcond=None)[0]     # y [X, R] → [2, R]


def steps_probe(rounds: int) -> None:
    """Per-call fixed cost: the one-token program at 1-16 steps a call and the plain
    loop at two lengths, interleaved; per round a line time = fixed + steps · step."""
    from specsim import pass_costs

    state, g, inrun = _setup((0.7,), 0.0)
    ctx = inrun.loop_context(g)
    ns = (24, g.max_new_tokens)
    steps = (1, 2, 4, 8, 16)
    t1 = {s: pass_costs.pass_calls(state.target, None, batch=1, cache_len=g.cache_len, k=1,
                                   steps=s, pieces=("target_1",), context=ctx).target_1
          for s in steps}
    ar = {n: inrun._staged(state.target, None, g.runs[0].rows, g, 0, n) for n in ns}
    jobs = [("T", s, c) for s, c in t1.items()] + [("A", n, c) for n, c in ar.items()]
    for _, _, c in jobs:
        _timed_both(c)
    got = {(r, x): ([], []) for r, x, _ in jobs}
    rng = np.random.default_rng(0)
    for _ in range(rounds):
        for i in rng.permutation(len(jobs)):
            r, x, c = jobs[i]
            w, cpu = _timed_both(c)
            got[(r, x)][0].append(w)
            got[(r, x)][1].append(cpu)
    print(f"cache {g.cache_len} slots, context {ctx}, {rounds} rounds")
    for ci, clock in enumerate(("wall", "cpu")):
        T = np.array([got[("T", s)][ci] for s in steps])                   # [5, R]
        a, b = _line_fit(steps, T)
        A = np.array([got[("A", n)][ci] for n in ns])                      # [2, R]
        la, lb = _line_fit([n - 1 for n in ns], A)
        print(f"  {clock}: one-token program step {1e3 * b.mean():.3f} ms, fixed per call "
              f"{1e3 * a.mean():.3f} ± {1.96e3 * a.std(ddof=1) / np.sqrt(rounds):.3f} ms; "
              f"loop step {1e3 * lb.mean():.3f} ms, fixed per call {1e3 * la.mean():.3f} "
              f"± {1.96e3 * la.std(ddof=1) / np.sqrt(rounds):.3f} ms")
        print(f"    program step / loop step {_mean_ci(100 * np.log(b / lb))}%")
        for s, row in zip(steps, T):
            print(f"    {s:2d} steps a call: per step / loop step (whole loop / steps) "
                  f"{_mean_ci(100 * np.log(row / s / (A[-1] / (ns[-1] - 1))))}%")


def pairing_probe(rounds: int) -> None:
    """How much of a round's swing its calls share: per round two pass sets, the plain
    loop and three speculative runs (reversed every second round), two pass sets; the
    correlation of the baseline's and each run's log-times over rounds, and the bootstrap
    spread of the measured speedup as a ratio of raw medians and in baseline units."""
    from specsim import pass_costs
    from specsim.experiment.inrun import in_baseline_units, measured_statistic

    state, g, inrun = _setup((0.5, 0.7, 0.9), 0.25)
    loops = [inrun._staged(state.target, r, g.runs[0].rows, g, 0, g.max_new_tokens)
             for r in (None, *g.runs)]
    pc = pass_costs.pass_calls(state.target, g.runs[0].drafter, batch=1, cache_len=g.cache_len,
                               k=4, steps=4, pieces=("target_1", "iteration"),
                               context=inrun.loop_context(g))
    for c in (*loops, pc.target_1, pc.iteration):
        _timed(c)
    passes = (pc.target_1, pc.iteration) * 2                 # two sets, untimed here
    t = np.zeros((rounds, len(loops)))
    for r in range(rounds):
        for c in passes:
            _timed(c)
        for j in (range(len(loops)) if r % 2 == 0 else reversed(range(len(loops)))):
            t[r, j] = _timed(loops[j])
        for c in passes:
            _timed(c)
    idx = np.random.default_rng(0).integers(0, rounds, (2000, rounds))
    print(f"{rounds} rounds, CPU clock; per run: sd over rounds of the log-times, their "
          f"correlation, bootstrap sd of the measured speedup (per cent)")
    for j in range(1, len(loops)):
        a, s_ = t[:, 0], t[:, j]
        la, ls = np.log(a), np.log(s_)
        raw = np.log(np.median(a[idx], 1) / np.median(s_[idx], 1))
        u = in_baseline_units({"ar": a, "spec": s_})
        paired = np.log(measured_statistic({k: np.median(v[idx], 1) for k, v in u.items()}))
        print(f"  run {j}: sd baseline {100 * la.std(ddof=1):.1f}, run {100 * ls.std(ddof=1):.1f}, "
              f"correlation {np.corrcoef(la, ls)[0, 1]:+.2f}; ratio of raw medians "
              f"{100 * raw.std():.2f}, in baseline units {100 * paired.std():.2f}")


def sweep_probe(rounds: int, repeats: int = 6) -> None:
    """The pass sweep's two schedules on the default demo's sweep cells, alternated
    ``repeats`` times each: every call in a fresh random order each round (medians of
    the raw times), and each cell as a block of paired rounds (`pass_sweep.sweep`:
    medians in units of the round's decode step). Per cell and verify width, the mean
    over repetitions of the verify pass over the decode step and its standard deviation
    (per cent of ln) under each schedule: what noise the prediction before the run
    inherits from the sweep."""
    import math

    from specsim import bench
    from specsim.experiment import paired, pass_sweep, pipeline
    from specsim.experiment.settings import DemoSettings

    state = pipeline.prepare(DemoSettings.demo(), progress=False)
    units, keys = pass_sweep.sweep_calls(state)
    flat = [c for u in units for c in u]
    for c in flat:
        _timed(c)
    rng = np.random.default_rng(0)
    schemes = ("random order", "paired blocks")
    logs = {name: [] for name in schemes}
    for rep in range(repeats):
        for name in (schemes if rep % 2 == 0 else schemes[::-1]):
            if name == "random order":
                samples, _ = bench.interleaved_rounds(flat, rounds, rng, clock=time.process_time)
                it = iter(float(np.median(x)) for x in samples)
                meds = [[next(it) for _ in u] for u in units]
            else:
                res = paired.paired_rounds(units, rng, min_rounds=rounds, max_rounds=rounds,
                                           budget_s=math.inf, converged=lambda u, x: False,
                                           clock=time.process_time, alternate=True)
                meds = [pass_sweep.paired_medians(x) for x in res.samples]
            logs[name].append([np.log(np.asarray(m[1:]) / m[0]) for m in meds])
    print(f"{repeats} sweeps of {rounds} rounds per schedule, CPU clock; per cell: "
          f"verify over decode step, mean and sd over sweeps (per cent of ln)")
    for u, cell in enumerate(keys):
        for j, (n, b, ctx) in enumerate(cell[1:]):
            parts = []
            for name in schemes:
                x = np.array([rep[u][j] for rep in logs[name]])
                parts.append(f"{name} {np.exp(x.mean()):.3f} sd {100 * x.std(ddof=1):.1f}")
            print(f"  batch {b:>2} context {ctx:>3} width {n}: " + "; ".join(parts))


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("probe", choices=["context", "sets", "steps", "pairing", "sweep"])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--designs", nargs="+", choices=list(DESIGNS),
                   default=["after", "each", "around", "around-8"],
                   help="the sets probe's orders of a round (DESIGNS)")
    a = p.parse_args(argv)
    if a.rounds < 3:
        p.error("--rounds must be at least 3")
    if a.probe == "sets":
        sets_probe(a.rounds, list(dict.fromkeys(a.designs)))
    else:
        probe = {"context": context_probe, "steps": steps_probe, "pairing": pairing_probe,
                 "sweep": sweep_probe}
        probe[a.probe](a.rounds)


if __name__ == "__main__":
    main()
