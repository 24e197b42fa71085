"""Which per-round estimator of a loop program's time pairs best: the one run a round
the policies part took until session 33, the least of 3 back-to-back runs from the same
prepared state (`decode.StagedCall.prepare(copies=3)`), or their median; by the wall and
the CPU clock. Cells of the policies grid at 40 tokens: batch 8 (mixed kinds, 512
slots) plain decoding, Goodput off throughout with layer-skip, layer-skip fixed K = 2;
batch 1 extraction plain decoding, the feature head at fixed K = 2 and 4 and under
Goodput at the pass costs session 32's grid (t40-loop) planned with. R interleaved rounds (shuffled) after
one warm-up; every run's 3 samples by both clocks are written to inner_study_<R>.csv,
and the spread of each ratio to plain decoding's over rounds printed.

    PYTHONPATH=. python data/policies-cpu-s33/inner_study.py <R>
    python data/policies-cpu-s33/inner_study.py <R> --table   # the table again, from the csv
"""
import sys, time
import numpy as np, pandas as pd

R, INNER, N = int(sys.argv[1]), 3, 40
CSV = f"data/policies-cpu-s33/inner_study_{R}.csv"


def measure():
    import jax
    from specsim import decode, models, workloads, experiment, policies as P
    from specsim.drafters import layer_skip_drafter
    from specsim.experiment.drafter_study import feature_head, find_feature_head

    t = models.load("smollm2-135m")
    ls = layer_skip_drafter(t, experiment.default_layer_skip(t.cfg.n_layers))
    fh = feature_head(find_feature_head("smollm2-135m"), t).drafter
    enc = lambda k: t.tokenizer.encode(workloads.prompt_text(k, t.tokenizer))  # noqa: E731
    mixed = [enc(k) for k in workloads.KINDS * 4][:8]
    ext = [enc("extraction")]
    off = P.Goodput(k_max=4, costs=P.Costs(t_draft=1.0, t_target=(1.0,) + (1.2,) * 4))
    fh_costs = P.Goodput(k_max=4, costs=P.Costs(t_draft=0.025, t_target=(1.0, 1.0, 1.062, 1.087, 1.087)))
    kw = dict(eos_token_id=None, temperature=0.0, seed=0)
    jobs = {
        ("b8", "ar"): lambda: decode.staged_autoregressive(t, mixed, N, cache_len=512, **kw),
        ("b8", "off"): lambda: decode.staged_speculative(t, ls, mixed, N, policy=off, cache_len=512, **kw),
        ("b8", "ls-k2"): lambda: decode.staged_speculative(t, ls, mixed, N, k=2, cache_len=512, **kw),
        ("b1", "ar"): lambda: decode.staged_autoregressive(t, ext, N, cache_len=512, **kw),
        ("b1", "fh-k2"): lambda: decode.staged_speculative(t, fh, ext, N, k=2, cache_len=512, **kw),
        ("b1", "fh-k4"): lambda: decode.staged_speculative(t, fh, ext, N, k=4, cache_len=512, **kw),
        ("b1", "fh-goodput"): lambda: decode.staged_speculative(t, fh, ext, N, policy=fh_costs, cache_len=512, **kw),
    }
    calls = {k: f() for k, f in jobs.items()}
    rows, rng = [], np.random.default_rng(0)
    for r in range(R + 1):
        order = list(calls)
        rng.shuffle(order)
        for key in order:
            c = calls[key]
            c.prepare(copies=INNER)
            for j in range(INNER):
                t0, c0 = time.perf_counter(), time.process_time()
                jax.block_until_ready(c())
                if r:
                    rows.append(dict(round=r, batch=key[0], job=key[1], inner=j,
                                     wall=time.perf_counter() - t0, cpu=time.process_time() - c0))
    df = pd.DataFrame(rows)
    df.to_csv(CSV, index=False)


def table(df):
    est = {"first": df[df.inner == 0], "least of 2": df[df.inner < 2], "least of 3": df}
    for clock in ("wall", "cpu"):
        for name, sub in [*est.items(), ("median of 3", None)]:
            g = (df if sub is None else sub).groupby(["batch", "job", "round"])[clock]
            per = (g.median() if sub is None else g.min()).unstack("round")
            out = []
            for (b, job), v in per.iterrows():
                if job == "ar":
                    continue
                ratio = per.loc[(b, "ar")] / v       # speedup against plain decoding, per round
                out.append(f"{b} {job} {np.median(ratio):.3f} sd {np.std(ratio, ddof=1):.3f} "
                           f"({ratio.min():.3f}-{ratio.max():.3f})")
            print(f"{clock:4s} {name:11s} | " + " | ".join(out), flush=True)


if "--table" not in sys.argv:
    measure()
table(pd.read_csv(CSV))
