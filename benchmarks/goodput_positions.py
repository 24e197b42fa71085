"""Goodput's settings judged by exact replays of batch-1 greedy runs on many prompts
(session 24): record what the drafter proposes from every state of each run
(`specsim.experiment.position_tables`), then replay Goodput settings on the tables
(`specsim.simulate.replay_positions`, seconds) against plain decoding and the best
fixed K of 1..4, counting issue 12's goals per prompt.

    PYTHONPATH=. python benchmarks/goodput_positions.py record [--drafters feature-head ngram] \
        [--new-tokens 160] --out-dir data/goodput-positions-s24     # ~13 min: DRAFTER_160.npz
    PYTHONPATH=. python benchmarks/goodput_positions.py replay TABLE.npz [--new-tokens 80 160] \
        [--ratios 1 1.65 1.76 1.94 1.94] [--draft-ratio C] [--p-min 0 0.2] [--hurdle 0 0.05] \
        [--budget none 0.015] [--judge-share 0.01]
    PYTHONPATH=. python benchmarks/goodput_positions.py calibration TABLE.npz

Prompts: the evaluation prompt of each kind of work and every shipped prompt
(data/prompts/), greedy output from the engine's autoregressive loop in batches of 16.
A replay charges fixed pass-time ratios t(n)/t(1) (default: the goals bench's, this
2-core CPU at batch 1) and a draft step ``--draft-ratio`` of a target step (default 0.035
for the feature head, 0 for n-gram lookup, as `bench_goodput_goals.py`); nothing is
timed, so nothing moves with the machine's noise. Goal 1: Goodput >= 0.98x plain
decoding; goal 2: >= 0.97x the best fixed K. ``calibration``: a draft's acceptance by
its confidence, per slot, over the states a FixedK(4) run would reach from each state.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

DRAFT_RATIOS = {"ngram": 0.0, "feature-head": 0.035}
OFF_DRAFTS = {"ngram": "free", "feature-head": "paid"}
K = 4


def _prompts(target):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sim_goodput_explore import shipped_by_kind

    from specsim import workloads
    from specsim.train.samples import encode_prompts as encode_set
    out = [(k, "eval", target.tokenizer.encode(workloads.prompt_text(k, target.tokenizer)))
           for k in workloads.KINDS]
    for kind, these in shipped_by_kind().items():
        out += [(kind, f"shipped{i}", p) for i, p in enumerate(encode_set(these, target.tokenizer))]
    return out


def record(args) -> None:
    from specsim import decode, models
    from specsim.drafters import NGramDrafter, feature_head_drafter
    from specsim.experiment.drafter_study import find_feature_head
    from specsim.experiment.position_tables import record as record_table

    t = models.load("smollm2-135m").with_layer_loop("scan")
    make = {"ngram": lambda: NGramDrafter(t.cfg.vocab_size, n=3),
            "feature-head": lambda: feature_head_drafter(t, find_feature_head(t.cfg.name))}
    drafters = {name: make[name]() for name in args.drafters}
    prompts = _prompts(t)
    got = {name: ([], [], []) for name in drafters}                    # ok, conf, names
    for s in range(0, len(prompts), 16):
        group = prompts[s:s + 16]
        res = decode.generate_autoregressive(t, [p for _, _, p in group], args.new_tokens,
                                             eos_token_id=None, cache_len=512)
        for (kind, src, p), out in zip(group, res.tokens):
            for name, d in drafters.items():
                table = record_table(t, d, p, out, K)
                got[name][0].append(table.ok)
                got[name][1].append(table.confidence.astype(np.float16))
                got[name][2].append(f"{kind}/{src}")
        print(f"{s + len(group)} / {len(prompts)} prompts", flush=True)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, (ok, conf, names) in got.items():
        out = out_dir / f"{name}_{args.new_tokens}.npz"
        tmp = out.with_suffix(".tmp.npz")
        np.savez_compressed(tmp, ok=np.stack(ok), confidence=np.stack(conf),
                            names=np.asarray(names), drafter=name, new_tokens=args.new_tokens)
        tmp.replace(out)
        print(f"wrote {out}")


def load(path):
    from specsim.simulate import PositionTable

    z = np.load(path)
    tables = [PositionTable(ok=o, confidence=np.clip(c.astype(np.float64), 0.0, 1.0))
              for o, c in zip(z["ok"], z["confidence"])]
    return [str(n) for n in z["names"]], tables, str(z["drafter"])


def replay(args) -> None:
    from specsim import policies as P
    from specsim.simulate import replay_positions

    names, tables, drafter = load(args.table)
    c = DRAFT_RATIOS[drafter] if args.draft_ratio is None else args.draft_ratio
    r = tuple(args.ratios)
    if len(r) != K + 1 or r[0] != 1.0 or min(r) <= 0:
        raise SystemExit(f"--ratios must give {K + 1} positive ratios t(n)/t(1), the first 1 "
                         f"(got {r})")
    costs = P.Costs(t_draft=c, t_target=r)
    off = OFF_DRAFTS[drafter]
    print(f"{drafter}, {len(tables)} prompts at batch 1, greedy; t(n)/t(1) = {r}, draft step "
          f"{c:g}; goals: >= 0.98x plain decoding (1), >= 0.97x the best fixed K of 1-{K} (2)\n")
    print("| new tokens | p_min | hurdle | budget | judge_share | geomean vs plain | vs best "
          "fixed K | goal-1 misses (worst) | goal-2 misses (worst) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.new_tokens:
        n = min(n, tables[0].n_tokens)
        best = np.asarray([max(replay_positions(P.FixedK(k=k), tb, costs, new_tokens=n).speedup
                               for k in range(1, K + 1)) for tb in tables])
        for p_min, hurdle, budget, share in itertools.product(args.p_min, args.hurdle,
                                                              args.budget, args.judge_share):
            pol = P.Goodput(k_max=K, costs=costs, p_min=p_min, hurdle=hurdle, budget=budget,
                            judge_share=share)
            s = np.asarray([replay_positions(pol, tb, costs, new_tokens=n, off_draft=off).speedup
                            for tb in tables])
            rel = s / best
            gm = np.exp(np.log([s, rel]).mean(1))
            print(f"| {n} | {p_min:g} | {hurdle:g} | {'off' if budget is None else f'{budget:g}'}"
                  f" | {share:g} | {gm[0]:.3f} | {gm[1]:.3f} | "
                  f"{int((s < 0.98).sum())} ({s.min():.3f}) | {int((rel < 0.97).sum())} "
                  f"({rel.min():.3f}) |", flush=True)


def calibration(args) -> None:
    _, tables, drafter = load(args.table)
    edges = np.linspace(0, 1, 11)
    print(f"{drafter}: acceptance of a reached draft by its confidence, FixedK({K}) from "
          f"every state (accepted / reached per bin)\n")
    print("| slot | " + " | ".join(f"{a:.1f}-{b:.1f}" for a, b in zip(edges[:-1], edges[1:]))
          + " |")
    print("|---|" + "---|" * 10)
    ok = np.concatenate([tb.ok for tb in tables])
    conf = np.concatenate([tb.confidence for tb in tables])
    before = np.concatenate([np.ones_like(ok[:, :1]), np.cumprod(ok, 1)[:, :-1]], 1).astype(bool)
    for j in range(K):
        m = before[:, j] & (conf[:, j] > 0)
        b = np.clip(np.digitize(conf[m, j], edges) - 1, 0, 9)
        cells = [f"{ok[m, j][b == i].mean():.2f} ({(b == i).sum()})" if (b == i).any() else "-"
                 for i in range(10)]
        print(f"| {j} | " + " | ".join(cells) + " |")


def parse_budget(text: str):
    """--budget (here and in bench_goodput_goals.py): 'none' (off) → None, or a number
    in [0, 1); anything else raises argparse.ArgumentTypeError."""
    if text.strip().lower() == "none":
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"must be 'none' or a number in [0, 1) (got {text!r})")
    return value


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--drafters", choices=tuple(DRAFT_RATIOS), nargs="+",
                     default=list(DRAFT_RATIOS))
    rec.add_argument("--new-tokens", type=int, default=160)
    rec.add_argument("--out-dir", required=True)
    rep = sub.add_parser("replay")
    rep.add_argument("table")
    rep.add_argument("--new-tokens", type=int, nargs="+", default=[80, 160])
    rep.add_argument("--ratios", type=float, nargs="+", default=[1.0, 1.65, 1.76, 1.94, 1.94])
    rep.add_argument("--draft-ratio", type=float, default=None)
    rep.add_argument("--p-min", type=float, nargs="+", default=[0.0, 0.2])
    rep.add_argument("--hurdle", type=float, nargs="+", default=[0.0])
    rep.add_argument("--budget", type=parse_budget, nargs="+", default=[None, 0.015],
                     help="Goodput's loss budget ε, or 'none' (off)")
    rep.add_argument("--judge-share", type=float, nargs="+", default=[0.01])
    cal = sub.add_parser("calibration")
    cal.add_argument("table")
    args = ap.parse_args(argv)
    if args.cmd == "record" and not 2 <= args.new_tokens <= 300:
        ap.error(f"--new-tokens must be in 2..300 (cache 512; got {args.new_tokens})")
    {"record": record, "replay": replay, "calibration": calibration}[args.cmd](args)


if __name__ == "__main__":
    main()
