"""Goodput's exploration bonus (`policies.Goodput(explore=...)`), replayed on recorded
traces: the study behind its default of 0.5.

    PYTHONPATH=. python benchmarks/sim_goodput_explore.py

Goodput plans from a per-row estimate of per-position acceptance; once it plans K = 0 a
row learns nothing new until the estimate's evidence decays, so after a few early
rejections it can stay off where drafting pays (n-gram lookup at batch 8, full policies
grid before the bonus: 0.92x plain decoding against fixed K 4's 1.42x). With ``explore``
it plans with an upper confidence bound, α̂ + z·sqrt(α̂(1 − α̂) / (n + w)), n the
decayed count of reached slots and w the prior weight, so a row that stopped drafting
grows more optimistic as its evidence decays, and one with much evidence does not.

For each cell (drafter, kind of work, batch): the engine records a FixedK(4) run under
the policy loop (SmolLM2-135M, 40 new tokens, greedy), and every policy is replayed on
that trace (`simulate.simulate_policy`, engine cost model) with the pass times the full
policies grid measured on this CPU (t_target(1), t_verify(5), t_draft per cell, from
`data/policies-cpu-full/policies.csv`). Printed: simulated speedup against plain
decoding / fraction of row-iterations at K = 0. The replay on another policy's trace
missed measured speedups by 6.8% on average there, so read the differences, not the
third digit.
"""

from __future__ import annotations

import numpy as np

from specsim import decode, experiment, models, simulate
from specsim import policies as P
from specsim.drafters import NGramDrafter, feature_head_drafter, layer_skip_drafter
from specsim.experiment.drafter_study import find_feature_head
from specsim.experiment.pipeline import encode_prompts
from specsim.experiment.policy_runs import costs_from_passes, trace_from_stats


# (drafter, kind, batch): (t_target_1, t_verify(5), t_draft) in seconds, full policies grid
B1, B8 = (0.044, 0.054), (0.077, 0.146)
CELLS = {("ngram", "code", 1): (*B1, 0.0), ("ngram", "extraction", 1): (*B1, 0.0),
         ("ngram", "json", 1): (*B1, 0.0), ("ngram", "prose", 1): (*B1, 0.0),
         ("ngram", "code", 8): (*B8, 0.0), ("ngram", "json", 8): (*B8, 0.0),
         ("layer-skip", "code", 1): (*B1, 0.037), ("layer-skip", "code", 8): (*B8, 0.069),
         ("feature-head", "code", 1): (*B1, 0.001), ("feature-head", "extraction", 1): (*B1, 0.001),
         ("feature-head", "code", 8): (*B8, 0.002)}


def main() -> None:
    target = models.load("smollm2-135m").with_layer_loop("scan")
    prompts = encode_prompts(target, ["code", "extraction", "json", "prose"])
    drafters = {"ngram": NGramDrafter(target.cfg.vocab_size, n=3),
                "layer-skip": layer_skip_drafter(
                    target, experiment.default_layer_skip(target.cfg.n_layers)),
                "feature-head": feature_head_drafter(target, find_feature_head(target.cfg.name))}
    print("| drafter | kind | batch | fixed K 4 | explore 0 | explore 0.5 | explore 1 | explore 2 |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, kind, batch), (t1, tv, td) in CELLS.items():
        stats = decode.generate_speculative(target, drafters[name], [prompts[kind]] * batch, 40,
                                            policy=P.FixedK(k=4)).stats
        # one verify time at every width: the policy loop of then verified K_max + 1
        trace = trace_from_stats(stats)
        costs = costs_from_passes(t1, dict.fromkeys(range(1, 5), tv), td, 4)
        policies = [P.FixedK(k=4)] + [P.Goodput(k_max=4, costs=costs, explore=z)
                                      for z in (0.0, 0.5, 1.0, 2.0)]
        cells = []
        for policy in policies:
            r = simulate.simulate_policy(policy, trace, costs=costs, cost_model="engine")
            cells.append(f"{r.speedup:.2f} / {np.mean(r.k_plan[r.present] == 0):.2f}")
        print(f"| {name} | {kind} | {batch} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
