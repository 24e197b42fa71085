"""Hypothesis: Goodput replayed on n-gram code turns off because off iterations judge slot 0
only. Replay with the whole chain judged while off (trace iteration i's slots up to the first
rejection) and compare."""
import numpy as np
from specsim import decode, models, workloads, simulate
from specsim import policies as P
from specsim.experiment import policy_runs as R
from specsim.drafters import NGramDrafter
t = models.load("smollm2-135m").with_layer_loop("scan")
d = NGramDrafter(t.cfg.vocab_size, n=3)
ratios = (1.0, 1.65, 1.76, 1.94, 1.94)
costs = P.Costs(t_draft=0.0, t_target=ratios)
for kind in ("code", "extraction"):
    prompt = [t.tokenizer.encode(workloads.prompt_text(kind, t.tokenizer))]
    rec = decode.generate_speculative(t, d, prompt, 40, policy=R.make_policy(R.RECORD, 4, None),
                                      eos_token_id=None, cache_len=256)
    tr = R.trace_from_stats(rec.stats)
    g = P.Goodput(k_max=4, costs=costs)
    eng = decode.generate_speculative(t, d, prompt, 40, policy=g, eos_token_id=None, cache_len=256)
    run = simulate.simulate_policy(g, tr, costs=costs, cost_model="engine", free_drafts=True)
    print(kind, "trace accept per slot", tr.accept[:, 0].mean(0).round(2), "chain lengths",
          np.sum(np.cumprod(tr.accept[:, 0], 1), 1))
    print("  engine k_used", eng.stats.k_used[:, 0][eng.stats.active[:, 0]])
    print("  replay k_plan", run.k_plan[:, 0], "speedup", round(run.speedup, 3))
    fixed = simulate.simulate_policy(P.FixedK(k=4), tr, costs=costs, cost_model="engine", free_drafts=True)
    print("  replay fixed 4 speedup", round(fixed.speedup, 3))
    # chain judged while off: every slot of trace iteration i up to its first rejection
    K = 4
    state = g.init(1, np); plans = []; toks = []; times = []
    for i in range(tr.accept.shape[0]):
        act = tr.present[i]
        plan = np.asarray(g.plan(state, 1, np, act)); plans.append(int(plan[0]))
        prop = P.n_proposed(g, plan, tr.confidence[i, :, :K], np)
        slot = np.arange(K)[None] < prop[:, None]
        acc = np.sum(np.cumprod(tr.accept[i, :, :K] & slot, axis=1), axis=1)
        state = g.update(state, plan, acc, prop, act, np)
        toks.append(int(acc[0]) + 1); times.append(costs.t_target[int(prop[0])])
        if not (plan[act] > 0).any():
            reached = np.concatenate([np.ones((1, 1), bool), np.cumprod(tr.accept[i, :, :K - 1], 1).astype(bool)], 1) & (tr.confidence[i, :, :K] > 0)
            hit = reached & tr.accept[i, :, :K]
            state = (state[0] + hit, state[1] + reached) + tuple(state[2:])
    print("  chain-judged replay k_plan", plans, "speedup",
          round(np.mean(toks) * costs.t_target[0] / np.mean(times), 3))
