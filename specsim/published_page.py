"""docs/studies/published-speedups.md: the iteration cost model against the published
GPU and TPU speedups (`specsim.published`), as a page, with the goals it is held to."""

from __future__ import annotations

from specsim.published import (PRIOR_SPREAD, draft_call_slopes, error_by_term, error_stats,
                               fitted_overheads, in_sample, leave_one_source_out,
                               load_published, replicate_pairs, summary,
                               t5_draft_cost_ratios)

__all__ = ["GOALS", "GOALS_CPU", "signed_pct", "markdown_stats_table", "validation_page"]

GOALS = dict(mape=0.08, mean_signed=0.03, worst=0.25)
# The measurement's goal for a prediction made before the run, held by the same model
# pointed at this CPU's measured ceilings (`specsim.experiment.ceiling_prediction`).
GOALS_CPU = dict(mape=0.08, worst=0.20)


def signed_pct(x: float) -> str:
    return f"{100 * x:+.1f}%" if x < 0 or x > 0 else "0.0%"


def markdown_stats_table(s) -> list[str]:
    lines = ["| rows | n | MAPE | mean signed | worst | within 10% |", "|---|---|---|---|---|---|"]
    for r in s.itertuples():
        lines.append(f"| {r.group} | {r.rows} | {100 * r.mape:.1f}% | {signed_pct(r.mean_signed)} | "
                     f"{signed_pct(r.worst)} | {100 * r.within_10:.0f}% |")
    return lines


def validation_page(root=None, extra_sections=()) -> str:
    """docs/studies/published-speedups.md, generated from the published set, with
    ``extra_sections`` (lists of lines) before its last line
    (`benchmarks/published_validation.py` writes it; a test checks it is current)."""
    df = load_published(root)
    pred, folds = leave_one_source_out(df)
    fitted = summary(pred)
    allrow = fitted.set_index("group").loc["all rows"]
    by_source = fitted.set_index("group")
    prior = summary(pred, "prior_only").set_index("group").loc["all rows"]
    closed = summary(pred, "closed_form").set_index("group").loc["all rows"]
    met = {k: abs(allrow[k]) <= v for k, v in GOALS.items()}
    ov = fitted_overheads(root)
    inside_rows = in_sample(df, overheads=ov)
    inside = summary(inside_rows)
    k_sweep = inside_rows[inside_rows["source_id"] == "vllm-eagle-k-sweep"].merge(
        df[["row_id", "drafter", "k"]], on="row_id")
    k_sweep = k_sweep[k_sweep["drafter"].str.startswith("EAGLE-")]
    k_sweep_err = {h: k_sweep.loc[k_sweep["drafter"].str.startswith(h), "error"]
                   for h in ("EAGLE-1", "EAGLE-3")}
    slopes = draft_call_slopes(df)
    inside_all = inside.set_index("group").loc["all rows"]
    reps = replicate_pairs(df)
    from specsim.papers import leviathan_table4

    t4 = leviathan_table4()
    paper_own = error_stats(t4["expected_recomputed"] / t4["measured"] - 1)
    ratios = t5_draft_cost_ratios()
    ratios_fitted = t5_draft_cost_ratios(overheads=ov["xla"])
    worst = pred.assign(abs_err=pred["error"].abs()).nlargest(8, "abs_err").merge(
        df[["row_id", "hardware", "target", "drafter_kind", "verify_tokens", "batch",
            "n_devices"]], on="row_id")
    out = [
        "# Published GPU and TPU speedups against the iteration cost model",
        "",
        "**Question.** From datasheet ceilings, model shapes and a result's own acceptance,",
        "does `specsim.iteration_cost` predict the wall-clock speedups others published for",
        "GPUs and TPUs, when every fitted parameter is fitted without the result's source?",
        "",
        f"**Answer.** Not to the goals. Over {int(allrow['rows'])} published rows from "
        f"{df['source_id'].nunique()} sources ({len(df) - int(allrow['rows'])} listed without a "
        f"model preset), leave-one-source-out: MAPE {100 * allrow['mape']:.1f}% (goal 8%), "
        f"mean signed error {signed_pct(allrow['mean_signed'])} (goal within 3%), worst "
        f"{signed_pct(allrow['worst'])} (goal 25%), {100 * allrow['within_10']:.0f}% of rows within 10%. "
        f"Goals met: MAPE {'yes' if met['mape'] else 'no'}, mean signed "
        f"{'yes' if met['mean_signed'] else 'no'}, worst {'yes' if met['worst'] else 'no'}. "
        f"Today's closed form (c the parameter ratio, a verify pass one decode step) misses "
        f"the same rows by MAPE {100 * closed['mape']:.1f}% (mean signed "
        f"{signed_pct(closed['mean_signed'])}); the cost model at its priors alone, "
        f"{100 * prior['mape']:.1f}% ({signed_pct(prior['mean_signed'])}). With every source's "
        f"rows in the fit (in sample, nothing held out) the same terms reach MAPE "
        f"{100 * inside_all['mape']:.1f}%, mean signed {signed_pct(inside_all['mean_signed'])}, "
        f"worst {signed_pct(inside_all['worst'])}: "
        + ("the goals are missed before any source is held out."
           if any(abs(inside_all[k]) > v for k, v in GOALS.items())
           else "within the goals when nothing is held out."),
        "",
        "**How.** `specsim.published.leave_one_source_out` predicts each row of",
        "`specsim/data/papers/published/results.csv` with the engine overheads (`EngineOverheads`: launch",
        "floor per layer, per-step, per-iteration and per-draft-call seconds) of its engine",
        "class fitted on the other sources' rows of that class, on log speedup and, where a",
        "row prints its baseline throughput, on the log seconds of a plain step, with a",
        f"log-normal prior (a factor of {PRIOR_SPREAD:g}) around `PRIOR_OVERHEADS`; a class with no",
        "rows in the other sources keeps the priors. T5X on TPU (Leviathan et al.) and",
        "TensorRT-LLM each come from one source, so their held-out predictions are the",
        "priors'. Hugging Face eager has two: Spec-Bench and the EAGLE paper (Li et al. 2024,",
        "Table 7: Vicuna-7B on an RTX 3090 at batch 1 to 4); held out, each is predicted with",
        "the overheads fitted on the other. Spec-Bench's rows come from two versions of its",
        "leaderboard (two software environments, the same harness); they form one source and",
        "are held out together. An EAGLE head's output layer scores its draft vocabulary:",
        "32000 tokens for EAGLE-3 heads (`EAGLE3_DRAFT_VOCAB`, their config.json), the share",
        "a row prints for FR-Spec (column `draft_vocab_fraction`), else the target's.",
        "Spec-Bench's SpS rows (Hugging Face assisted generation) draft at the mean length of",
        "its heuristic schedule (K + 2 after a fully accepted draft, else K - 1, from 5) at",
        "their τ (`heuristic_draft_length`: about 3 where the printed K is 5).",
        "A plain step is read from a printed baseline throughput at batch 1 only: the",
        "Qwen3 rows at batch 4 to 64 print output tokens over a fixed set of requests at that",
        "concurrency (latency × throughput is the same ~174k tokens at every batch), which",
        "is not batch over a step's seconds.",
        "",
        "How each engine spends its overheads (`EngineOverheads.floor_adds`,",
        "`plain_hides_step`; not fitted): PyTorch eager dispatch runs ahead of the GPU, so a",
        "pass costs the larger of its roofline and its layers' floor; a CUDA graph (vLLM,",
        "SGLang, TensorRT-LLM) or a compiled XLA program runs its kernels back to back, so",
        "the floor adds to the roofline. On the TPU rows this is checked without any",
        "speedup: Leviathan et al. print the measured cost of each T5 draft pass over a",
        "T5-XXL pass (Table 4's c); the XLA class's prior floor (10 us a layer) gives",
        "these, added and overlapped:",
        "",
        "| draft | c printed | c, floor added | c, floor overlapped |",
        "|---|---|---|---|",
        *[f"| {r.draft} | {r.c_paper:.2f} | {r.c_floor_adds:.3f} | {r.c_floor_overlaps:.3f} |"
          for r in ratios.itertuples()],
        "",
        "Fitted to Leviathan et al.'s speedups alone (every row, so in-sample), the XLA floor",
        f"comes out at {1e6 * ov['xla'].layer_floor:.1f} us a layer, where the added form "
        "gives c = " + ", ".join(f"{r.c_floor_adds:.3f}" for r in ratios_fitted.itertuples())
        + ".",
        "",
        "SGLang's overlap scheduler hides a plain step's host work behind the GPU pass, and",
        "its speculative decoding does not overlap (\"speculative decoding currently does not",
        "support overlap scheduling\", SGLang pull request 9588): a plain step costs the",
        "larger of its pass and its host step, a speculative iteration both.",
        "",
        "Choices made after seeing results, so the numbers here are not free of them (every",
        "number in this paragraph was measured before the EAGLE paper's rows were added): the",
        "serving engines are classes of their own (one class for vLLM, SGLang and TensorRT-LLM",
        "together gave MAPE 22.0%, mean signed +7.4% on the first 90 rows); the plain-step",
        "term; and a class is fitted from as little as one training row (requiring three left",
        "SGLang at its priors whenever the Qwen3 source was held out: MAPE 16.0%, mean signed",
        "+4.6%, worst +109% on the 124 rows then); the draft vocabulary and the assisted",
        "schedule (MAPE 14.7%, mean signed +3.5%, worst +72.5% without both; 14.3%, +3.0%",
        "with the vocabulary alone; the earlier numbers in this paragraph are without both);",
        "the engines' forms above (before them, with every floor overlapped and every host",
        "step added, and plain steps read at batch 4 to 64: MAPE 13.7%, mean signed +3.7%, worst",
        "+71.6%; the plain steps at batch 1 only, 13.6%, +3.7%, +71.6%; SGLang's hidden host",
        "step added to that, 13.7%, -0.8%, +63.5%; with it, floors added for XLA alone,",
        "13.7%, -1.2%, +55.0%; floors added without SGLang's hidden step, 13.4%, +2.7%,",
        "+76.9%). Tried and not kept: a pass whose compute and memory overlap only in part",
        "(its roofline plus a share κ of the smaller of the two, before the engines' forms):",
        "MAPE 13.4%, 15.9%, 21.4% at κ = 0.25, 0.5, 1 (mean signed -0.2%, -3.5%, -8.6%),",
        "Spec-Bench's A100 rows turning slow; the eager priors scaled together by the",
        "documented eager decode rate below (×3.9): Spec-Bench's MAPE 12.9% (-8.1%), its",
        "draft-model and EAGLE rows slow. One factor per overhead shared by every",
        "class's prior and fitted on all training rows (so that a class without rows",
        "inherits how far the other priors are off): the serving engines' large",
        "per-iteration overheads then moved Hugging Face eager's, and MAPE rose to 23.3%",
        "(mean signed -7.0%). An eager launch floor derived from a documented measurement",
        "(a plain PyTorch eager Llama-7B decodes 25.5 tokens/s on an A100-80GB, CPU-bound:",
        "pytorch.org/blog/accelerating-generative-ai-2, so 1.16 ms a layer after the 2 ms",
        "step prior): Spec-Bench's rows are then predicted 19.8% fast on average (MAPE 19.2%,",
        "mean signed +15.3% overall): its trees' verify and drafting cost an eager engine more",
        "than the layers' dispatch, a term that only Spec-Bench, then the one eager source,",
        "could fit.",
        "",
        f"Rows that measure one setup twice ({len(reps)} pairs: two versions of the Spec-Bench",
        "leaderboard, re-runs within one vLLM pull request) differ by "
        f"{100 * reps['difference'].abs().mean():.1f}% on average (largest "
        f"{100 * reps['difference'].abs().max():.1f}%) in speedup per token an iteration yields",
        "(`replicate_pairs`): what no cost model can explain on them.",
        "",
        "## Leave-one-source-out, fitted overheads",
        "",
        *markdown_stats_table(fitted),
        "",
        "## The same model fitted on every row (in sample)",
        "",
        "The overheads `specsim.predict` uses, fitted on every row, each row's own source",
        "included (`in_sample`). A held-out fit cannot expect to do better; the rows these",
        "terms miss even here are misses of the terms or of the data, not of the split.",
        "",
        *markdown_stats_table(inside),
        "",
        "## Where the error comes from",
        "",
        "The same predictions grouped by the terms a row exercises: its engine class (the",
        "overheads) and drafter kind (the draft's cost); share: the group's part of the",
        "summed absolute error.",
        "",
        "| engine class | drafter | sources | n | MAPE | mean signed | worst | share |",
        "|---|---|---|---|---|---|---|---|",
        *[f"| {r.engine_class} | {r.drafter_kind} | {r.sources} | {r.rows} | "
          f"{100 * r.mape:.1f}% | {signed_pct(r.mean_signed)} | {signed_pct(r.worst)} | "
          f"{100 * r.share:.0f}% |" for r in error_by_term(pred, df).itertuples()],
        "",
        "## The same rows at the priors alone, and with today's closed form",
        "",
        "Priors only:",
        "",
        *markdown_stats_table(summary(pred, "prior_only")),
        "",
        "Closed form (Thm 3.8 in τ form with c the parameter ratio):",
        "",
        *markdown_stats_table(summary(pred, "closed_form")),
        "",
        "## The largest misses",
        "",
        "| row | source | hardware | target | drafter | verify tokens | batch | TP | observed | predicted | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in worst.itertuples():
        out.append(f"| {r.row_id} | {r.source_id} | {r.hardware} | {r.target} | {r.drafter_kind} | "
                   f"{int(r.verify_tokens)} | {int(r.batch)} | {int(r.n_devices)} | "
                   f"{r.observed:.2f} | {r.predicted:.2f} | {signed_pct(r.error)} |")
    out += [
        "",
        "What the misses have in common, and which term is missing:",
        "",
        "- Qwen3-30B-A3B under SGLang (one author, two issues): the printed plain step at",
        "  batch 1 is 4.5 ms at tensor-parallel 2 and 4 alike (roofline 1.1 and 0.5 ms,",
        "  all-reduces 0.8 ms), a speculative iteration 2.1 to 4.0 plain steps. Held out, the",
        "  SGLang overheads come from the one Llama-3.3-70B row, a dense target: the model has",
        "  no measured term for a mixture-of-experts layer's kernels at a few tokens (its",
        "  floor is a prior twice a dense layer's), and no other source has a",
        "  mixture-of-experts target to fit one on. The batch-4 to batch-64 rows are",
        "  throughputs of a fixed request set draining at that concurrency (their printed",
        "  plain steps, 8 to 52 ms, are no step's seconds), and their speedups move",
        "  non-monotonically with batch (0.94, 0.99, 0.82, 1.06 at batch 4, 8, 32, 64).",
        f"- T5 drafts on TPU: Leviathan et al.'s own expected speedups (Thm 3.8 at their",
        f"  measured c, Table 4) miss their measured ones by MAPE {100 * paper_own['mape']:.1f}%, mean signed",
        f"  {signed_pct(paper_own['mean_signed'])}, worst {signed_pct(paper_own['worst'])}: the T5-large rows run far slower than",
        "  their c (τ / speedup: a draft call of about 0.23 plain steps on EnDe against the",
        "  printed 0.11), four rows faster than a free draft allows (papers/leviathan2023).",
        "  What a cost model of the draft can reach on this source is about that.",
        "- Spec-Bench's EAGLE-1 and 68M-parameter draft (SpS) on the A100 are predicted too",
        "  slow at the eager priors: the priors' plain step (about 10 ms for Vicuna-7B) is",
        "  far below what the fit on all rows gave before the EAGLE paper's rows were added",
        "  (about 28 ms, Python dispatch), so every draft call weighs too much against it.",
        "  Its free trees (REST, lookahead, token recycling: 57 to 81 tokens verified) cost",
        "  0.2 to 0.4 plain steps beyond one in an iteration (τ / speedup - 1) on Vicuna-7B,",
        "  13B and 33B alike, a cost that grows with the model as its plain step does; the",
        "  priors' overheads are seconds that do not, and the 33B's verify stays under its",
        "  weights' read time, so its trees are predicted fast (token recycling "
        f"{signed_pct(float(pred.set_index('row_id').loc[36, 'error']))}, row 36).",
        "- The two eager sources disagree on one setup: EAGLE-1's tree (25 nodes, 5 draft",
        "  calls) on Vicuna-7B on an RTX 3090 at batch 1 gives 2.90x at τ 3.94 in the EAGLE",
        "  paper (MT-bench) and 2.03x and 2.16x at τ 3.57 in the two Spec-Bench leaderboards",
        "  (rows 3 and 92): 0.74 of τ against 0.57 and 0.61. With the same terms the cost",
        "  model's speedup is proportional to τ, so no overheads of one class fit both; held",
        f"  out, the EAGLE paper's rows are predicted {signed_pct(by_source.loc['eagle2024', 'mean_signed'])} "
        f"on average and Spec-Bench's {signed_pct(by_source.loc['specbench', 'mean_signed'])}",
        "  (before the EAGLE rows, Spec-Bench held out at the eager priors: -0.7%).",
        "- Long context (`vllm-frspec`, >4k tokens, K=1): the printed plain step barely moves",
        "  (74.9 to 72.7 tokens/s) while the speculative iteration grows by about 8 ms; the",
        "  model's KV and attention terms grow with context in both and keep the gain. The",
        "  pull request measured one prompt of that benchmark (\"1 sample\").",
        "- EAGLE-1 against EAGLE-3 heads under vLLM (`vllm-eagle-k-sweep`, one author, K 2",
        "  to 7 at batch 1): in sample the EAGLE-1 rows read "
        f"{signed_pct(k_sweep_err['EAGLE-1'].min())} to {signed_pct(k_sweep_err['EAGLE-1'].max())} "
        f"and the EAGLE-3 rows {signed_pct(k_sweep_err['EAGLE-3'].min())} to "
        f"{signed_pct(k_sweep_err['EAGLE-3'].max())}, the",
        "  EAGLE-3 error growing with K. The printed TPOT and τ give what one more draft call",
        "  costs (`draft_call_slopes`, the slope of an iteration's seconds over its calls):",
        *[f"  {r.drafter.split(' (')[0]} {1e3 * r.measured_s:.2f} ms, where its shape reads "
          f"{r.model_bytes / 1e9:.2f} GB a call ({1e3 * r.model_s:.2f} ms at the datasheet "
          f"ceilings){';' if i + 1 < len(slopes) else '.'}" for i, r in enumerate(slopes.itertuples())],
        "  EAGLE-1's head scores the target's 128256-token vocabulary and EAGLE-3's 32000, so",
        "  the model prices an EAGLE-3 call at half an EAGLE-1 call's bytes; measured, it costs",
        "  more. vLLM's maintainers expected the two heads' layers to cost the same (vLLM pull",
        "  request 16937); what makes EAGLE-3's calls dearer there is not printed, and one",
        "  overhead per draft call for the class cannot fit both heads.",
        "",
        "## Overheads fitted on every row (what `specsim.predict` uses)",
        "",
        "| engine class | layer floor (us) | step (ms) | iteration (ms) | draft call (ms) | "
        "floor | plain step |",
        "|---|---|---|---|---|---|---|",
    ]
    for cls, o in ov.items():
        out.append(f"| {cls} | {1e6 * o.layer_floor:.1f} | {1e3 * o.step:.3f} | "
                   f"{1e3 * o.iteration:.3f} | {1e3 * o.draft_call:.3f} | "
                   f"{'adds' if o.floor_adds else 'overlaps'} | "
                   f"{'hides its host step' if o.plain_hides_step else 'adds its host step'} |")
    for section in extra_sections:
        out += ["", *section]
    out += ["", "Reproduce: `python benchmarks/published_validation.py` (writes this page; "
            "seconds).", ""]
    return "\n".join(out)
