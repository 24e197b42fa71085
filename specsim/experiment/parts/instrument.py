"""Part ``instrument``: the instrument drafter (set α, set draft cost) over α × K × draft
cost at batch 1 and temperature 0, every run predicted from pass times measured in the
same interleaved rounds (`specsim.experiment.inrun`). The measured speedup surface over
(α, K) is the one the closed form describes.

α is a traced child of the drafter, so one compiled program serves every α of a
(K, cost): the grid compiles len(ks) × len(costs) speculative programs."""

from __future__ import annotations

from specsim import schema
from specsim.experiment import inrun
from specsim.experiment.part import Part
from specsim.experiment.state import DemoState


def prompt_rows(state: DemoState, batch: int) -> tuple:
    """``batch`` different prompt rows of ``prompt_tokens`` tokens each (a short prompt
    keeps the prefill small): the four kinds of work cycled, row b taking the window of
    its kind's prompt that starts b // 4 · 5 tokens in (so no two rows are equal while
    the prompts are long enough)."""
    from specsim import workloads
    from specsim.experiment.prompts import encode_prompts

    keep = state.settings.prompt_tokens
    prompts = {**encode_prompts(state.target, workloads.KINDS), **state.prompts}
    order = list(dict.fromkeys((*state.settings.kinds, *workloads.KINDS)))
    rows = []
    for b in range(batch):
        p = prompts[order[b % len(order)]]
        if not keep:
            rows.append(tuple(p))
            continue
        start = min((b // len(order)) * 5, max(0, len(p) - keep))
        rows.append(tuple(p[start:start + keep]))
    return tuple(rows)


def draft_layers(target, cost: float) -> int:
    """Target layers one instrument draft step runs for a cost given as a fraction of
    the target's layers (0: no work; else at least one layer)."""
    L = target.cfg.n_layers
    return 0 if cost == 0 else min(L, max(1, round(cost * L)))


def instrument_group(state: DemoState, batch: int, alphas, ks, costs,
                     max_new_tokens: int | None = None) -> inrun.Group:
    """The runs of the instrument over ``alphas`` × ``ks`` × ``costs`` at ``batch``, each
    row ``max_new_tokens`` long (default ``settings.max_new_tokens``). At batch 1 its
    accept/reject states are quasi-random, so a run of a few dozen iterations realises
    the set α (`instrument_drafter`'s ``draws``); at batch > 1 they stay independent,
    as the slowest-row theory takes them."""
    from specsim.drafters import instrument_drafter, reference_tokens

    s, target = state.settings, state.target
    rows = prompt_rows(state, batch)
    k_max, n = max(ks), max_new_tokens or s.max_new_tokens
    S = inrun.group_cache_len(target, rows, n, k_max)
    ref = reference_tokens(target, [list(r) for r in rows], n + k_max + 1, cache_len=S)
    kind = s.kinds[0] if batch == 1 else "mixed"
    runs = []
    for cost in costs:
        layers = draft_layers(target, cost)
        for a in alphas:
            d = instrument_drafter(target, [list(r) for r in rows], n, k_max=k_max,
                                   alpha=float(a), layers=layers, reference=ref,
                                   draws="quasi" if batch == 1 else "random")
            runs += [inrun.SpecRun(name=d.name, drafter_kind="instrument", drafter=d, k=int(k),
                                   kind=kind, rows=rows, cost_key=f"L{layers}",
                                   acceptance=("iid", float(a)),
                                   extra={schema.DRAFT_LAYERS: layers}) for k in ks]
    return inrun.Group(temperature=0.0, cache_len=S, max_new_tokens=n, runs=tuple(runs))


def run(state: DemoState) -> None:
    s = state.settings
    group = instrument_group(state, 1, s.instrument_alphas, s.instrument_ks, s.instrument_costs)
    inrun.add_runs(state, inrun.measure(state, group, state.timing_budget("instrument")))


PART = Part(name="instrument", summary="the instrument drafter over α × K × draft cost "
            "(batch 1), predicted from in-run pass times", run=run, produces=(schema.RUNS,))
