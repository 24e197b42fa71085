"""How the demo's pass programs should be timed beside the loops they predict.

Two probes on the default target (SmolLM2-135M), the instrument drafter at batch 1,
K 4, 40 new tokens from a 28-token prompt (the default demo's instrument group):

* ``context``: the one-token pass program at several contexts against the loop's own
  decode step (its plain-decoding loop over the decode tokens), interleaved rounds;
  the mean and 95% interval of 100 ln(pass / step) per context.
* ``sets``: per round, the plain loop and three speculative runs (α 0.5, 0.7, 0.9,
  8 draft layers), with the pass programs (t_target(1) and the iteration) timed once
  after the loops, or once after each loop (4 steps or 2 steps a call); the standard
  deviation over rounds of the prediction's cost ratio ln(t1 / t_iteration) against
  that of the measured ln(T_AR / T_spec).

    python benchmarks/pass_timing_probe.py context --rounds 30
    python benchmarks/pass_timing_probe.py sets --rounds 20

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
    import jax

    if hasattr(call, "prepare"):
        call.prepare()
    t0 = time.process_time()
    jax.block_until_ready(call())
    return time.process_time() - t0


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


def sets_probe(rounds: int) -> None:
    import jax
    from specsim import pass_costs

    state, g, inrun = _setup((0.5, 0.7, 0.9), 0.25)
    ctx = inrun.loop_context(g)
    pcs = {st: pass_costs.pass_calls(state.target, g.runs[0].drafter, batch=1,
                                     cache_len=g.cache_len, k=4, steps=st,
                                     pieces=("target_1", "iteration"), context=ctx)
           for st in (2, 4)}
    ar = inrun._staged(state.target, None, g.runs[0].rows, g, 0, g.max_new_tokens)
    specs = [inrun._staged(state.target, r, r.rows, g, 0, g.max_new_tokens) for r in g.runs]
    for c in (ar, *specs):
        jax.block_until_ready(c())
    designs = {"one set of 4 steps after the loops": (4, "end"),
               "a set of 4 steps after each loop": (4, "each"),
               "a set of 2 steps after each loop": (2, "each")}
    base, spec = [], [[] for _ in specs]
    pred = {d: [] for d in designs}
    for _ in range(rounds):
        acc = {d: np.zeros(2) for d in designs}

        def passes(where: str) -> None:
            for d, (steps, when) in designs.items():
                if when == where:
                    pc = pcs[steps]
                    acc[d] += [_timed(pc.target_1), _timed(pc.iteration)]

        base.append(_timed(ar))
        passes("each")
        for j, c in enumerate(specs):
            spec[j].append(_timed(c))
            passes("each")
        passes("end")
        for d in designs:
            pred[d].append(acc[d])
    sd = lambda x: 100 * float(np.std(x, ddof=1))
    measured = [sd(np.log(np.asarray(base) / np.asarray(s))) for s in spec]
    print(f"{rounds} rounds; per-round sd of the measured speedups: "
          + ", ".join(f"{m:.2f}%" for m in measured))
    for d, v in pred.items():
        v = np.asarray(v)
        print(f"  {d}: sd of the prediction's cost ratio {sd(np.log(v[:, 0] / v[:, 1])):.2f}%")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("probe", choices=["context", "sets"])
    p.add_argument("--rounds", type=int, default=20)
    a = p.parse_args(argv)
    if a.rounds < 3:
        p.error("--rounds must be at least 3")
    (context_probe if a.probe == "context" else sets_probe)(a.rounds)


if __name__ == "__main__":
    main()
