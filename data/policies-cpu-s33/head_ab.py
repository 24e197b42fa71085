"""Does the shared verify head cost the policy loop its goal-2 margin at batch 1? The
feature head on the code prompt, batch 1, 40 tokens, 512 slots, SmolLM2 with the demo's
scan layer loop: Goodput's policy program (t40-b3's batch-1 costs, the demo's "auto"
verify widths) with one shared head (`decode.SHARED_HEAD_ROWS` 5: the multi-token widths share one
head over all K_max + 1 rows, session 21's default), with heads shared by runs of 2
consecutive widths (`grouped(2)`, not kept) and with a head per width
(`SHARED_HEAD_ROWS` 0, the default since session 33), beside the plain fixed-K programs
at K = 1 and 2; each policy program's heads and compile time (one sample each). Every program compiled ahead of time (`LoopCall.lower().compile()`), each
run from a fresh copy of the same prefilled state (`LoopCall.fresh_copy`); R interleaved
rounds (shuffled, one warm-up), the least of 2 runs a round (`bench.interleaved_rounds`;
head_ab_10.txt was taken with an inline loop of the same design). Prints each program's
median seconds and its ratio to the fixed K = 2 program.

    PYTHONPATH=. python data/policies-cpu-s33/head_ab.py <R>
"""
import sys, time
import numpy as np, jax
from specsim import bench, decode, models, workloads, policies as P
from specsim.experiment.drafter_study import feature_head, find_feature_head

R, N, S = int(sys.argv[1]), 40, 512
t = models.load("smollm2-135m").with_layer_loop("scan")
fh = feature_head(find_feature_head("smollm2-135m"), t).drafter
prompt = [t.tokenizer.encode(workloads.prompt_text("code", t.tokenizer))]
kw = dict(eos_token_id=None, temperature=0.0, seed=0, cache_len=S)
goodput = P.Goodput(k_max=4, costs=P.Costs(t_draft=0.028, t_target=(1, 1.100, 1.238, 1.297, 1.385)))
programs = {}
for k in (1, 2):
    loop = decode.speculative_loop(t, fh, prompt, N, k=k, **kw)
    programs[f"fixed K={k}"] = (loop, loop.lower().compile())
ROWS, HEAD_WIDTHS = decode.SHARED_HEAD_ROWS, decode._head_widths


def grouped(group):
    """`decode._head_widths` with the multi-token widths sharing heads in runs of
    ``group`` consecutive widths, each as wide as its run's widest (session 21's sharing
    is group 4 at K_max 4; group 2 is the variant tried in session 33 and not kept)."""
    def head_widths(widths, batch):
        multi = sorted({w for w in widths if w > 1})
        if batch * max(widths) > decode.SHARED_HEAD_ROWS:
            return {w: [w] for w in widths}
        out = {}
        for w in widths:
            j = multi.index(w) if w > 1 else None
            hw = w if j is None else multi[min((j // group + 1) * group, len(multi)) - 1]
            out.setdefault(hw, []).append(w)
        return out
    return head_widths


for rows, group in ((5, 4), (5, 2), (0, 4)):   # one shared head, heads in pairs, per width
    decode.SHARED_HEAD_ROWS, decode._head_widths = rows, grouped(group)
    decode._policy_program.clear_cache()          # both are read while tracing
    loop = decode.speculative_loop(t, fh, prompt, N, policy=goodput, **kw)   # auto widths
    t0 = time.perf_counter()
    programs[f"goodput rows={rows} group={group}"] = (loop, loop.lower().compile())
    print(f"goodput rows={rows} group={group}: heads at "
          f"{decode._head_widths(loop.static['widths'], 1)}, "
          f"lowered and compiled in {time.perf_counter() - t0:.2f} s", flush=True)
decode.SHARED_HEAD_ROWS, decode._head_widths = ROWS, HEAD_WIDTHS


class Run:
    """One compiled loop, run from a fresh copy of its prefilled state (`bench.
    interleaved_rounds` calls ``prepare`` outside the timed region)."""

    def __init__(self, loop, compiled):
        self.loop, self.compiled, self.ready = loop, compiled, []

    def prepare(self, copies=1):
        self.ready = [self.loop.fresh_copy().args for _ in range(copies)]
        jax.block_until_ready(self.ready)

    def __call__(self):
        return self.compiled(*self.ready.pop())


samples, _ = bench.interleaved_rounds([Run(*v) for v in programs.values()], R + 1,
                                      np.random.default_rng(0), warmup=1, inner=2)
times = dict(zip(programs, samples))
ref = np.median(times["fixed K=2"])
for name, ts in times.items():
    print(f"{name:20s} {np.median(ts):.4f} s (range {min(ts):.4f}-{max(ts):.4f}) "
          f"fixed K=2 / this {ref / np.median(ts):.3f}", flush=True)
