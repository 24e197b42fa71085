"""How the feature head's acceptance grows with the target samples it learns from.

    python benchmarks/feature_head_data.py [--prompts 75 150] [--heads PATH ...]
                                           [--new-tokens 96] [--out DIR]

Trains the default feature head (`specsim train-draft --kind feature-head` settings:
1000 steps, width 768, 8192-token head) on the target's continuations of only the first
N prompts of `data/prompts/prompts.jsonl` for each N of ``--prompts`` (held out: 30 of
them, as the default run), then measures every head, and the ``--heads`` given (the
committed one by default, trained on all 305 + 30 prompts), the way the demo does: greedy
speculative decoding of SmolLM2-135M at K = 4 on the code and JSON prompts, with the
acceptance per draft position (α_j = P(draft j accepted | drafts 1..j−1 accepted)),
the accepted/proposed rate and the i.i.d. α whose closed form gives the run's tokens per
iteration, and the least-squares slope of that α per doubling of the training positions
(whether more target samples would reach the issue's α ≥ 0.6). Heads are cached in ``--out`` (a second
call only measures). Writes ``--out``/feature_head_data.csv.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specsim import analytic, decode, models  # noqa: E402
from specsim.drafters import feature_head_drafter  # noqa: E402
from specsim.experiment.drafter_study import find_feature_head  # noqa: E402
from specsim.experiment.pipeline import encode_prompts  # noqa: E402
from specsim.train import feature_head as fh  # noqa: E402

K = 4
KINDS = ("code", "json")


def iid_alpha(tokens_per_iteration: float, k: int) -> float:
    """The α whose closed form E = (1 − α^{K+1}) / (1 − α) equals the measured tokens
    per iteration (bisection; E rises with α from 1 to K + 1)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if float(analytic.expected_tokens(mid, k)) < tokens_per_iteration:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def measure(target, head: Path, prompts: dict, new_tokens: int) -> dict:
    drafter = feature_head_drafter(target, head)
    row = {}
    for kind in KINDS:
        st = decode.generate_speculative(target, drafter, [prompts[kind]], new_tokens, k=K,
                                         temperature=0.0, eos_token_id=None).stats
        rates = st.per_position_per_slot
        row.update({f"{kind}_alpha_1": rates[0], f"{kind}_alpha_2_4": float(np.nanmean(rates[1:])),
                    f"{kind}_alpha_per_proposal": st.alpha_per_proposal,
                    f"{kind}_alpha_iid": iid_alpha(st.tokens_per_iteration, K),
                    f"{kind}_tokens_per_iteration": st.tokens_per_iteration})
    return row


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, nargs="*", default=[75, 150],
                    help="train one head on the first N prompts for each N (default 75 150)")
    ap.add_argument("--heads", nargs="*", default=None,
                    help="more trained heads (.npz) to measure (default: the committed one)")
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--out", default="results/feature-head-data")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    target = models.load("smollm2-135m").with_layer_loop("scan")
    heads = {}
    for n in args.prompts:
        path = out / f"head-prompts{n}.npz"
        if not path.is_file():
            t0 = time.perf_counter()
            r = fh.train_feature_head(target, path, fh.FeatureHeadConfig(n_prompts=n, minutes=None),
                                      progress=False)
            print(f"trained on {n} prompts in {time.perf_counter() - t0:.0f} s "
                  f"({r.meta['data']['train_examples']} positions)", flush=True)
        heads[f"prompts{n}"] = path
    for p in args.heads if args.heads is not None else [find_feature_head(target.cfg.name)]:
        heads[Path(p).stem] = Path(p)
    prompts = encode_prompts(target, KINDS)
    rows = []
    for name, path in heads.items():
        meta = json.loads(path.with_suffix(".json").read_text())
        row = {"head": name, "train_positions": meta["data"]["train_examples"],
               "samples": meta["data"]["samples"],
               "heldout_chain_alpha": " ".join(f"{a:.3f}" for a in
                                               meta["alpha_per_slot_heldout_greedy"])}
        row.update(measure(target, path, prompts, args.new_tokens))
        rows.append(row)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v)
                          for k, v in row.items()}), flush=True)
    import pandas as pd
    table = pd.DataFrame(rows).sort_values("train_positions")
    table.to_csv(out / "feature_head_data.csv", index=False)
    if len(table) > 1:
        x = np.log(table["train_positions"].to_numpy(float))
        for col in ("code_alpha_iid", "json_alpha_iid"):
            slope = np.polyfit(x, table[col].to_numpy(float), 1)[0] * np.log(2)
            print(f"{col}: {slope:+.3f} per doubling of the training positions (least squares "
                  f"over {len(table)} heads)")
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
