"""Writing the distilled draft, and measuring its acceptance.

The folder is an ordinary Hugging Face checkpoint of the draft as a full model (the
target's shape with fewer layers, the target's tied embedding), so `models.load` reads
it and any tool can run it; ``specsim_draft.json`` beside it holds the head vocabulary
and how the draft was made (`specsim.drafters.distilled_drafter` reads both).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import jax
import numpy as np

from specsim.drafters.distilled import METADATA_FILE
from specsim.train.draft import full_params

__all__ = ["save_draft", "measure_alpha", "alpha_per_slot", "evaluate_alpha",
           "default_draft_path"]

FORMAT = "specsim-distilled-v1"


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def alpha_per_slot(stats) -> float:
    """Accepted drafts over the K slots of every iteration (an empty slot is a rejection)."""
    a = stats.active
    slots = stats.k * a.sum()
    return float(stats.accepted[a].sum() / slots) if slots else float("nan")


def measure_alpha(target, drafter, *, kinds=("code", "json", "extraction", "prose"), k: int = 4,
                  temperatures=(0.0,), max_new_tokens: int = 48, seed: int = 0) -> dict:
    """α per draft slot of ``drafter`` with ``target`` on the `specsim.workloads` prompts:
    {"k": K, "max_new_tokens": N, "alpha_per_slot": {"<kind>@T<temp>": α}}."""
    from specsim.decode import generate_speculative
    from specsim.workloads import prompt_text

    out = {}
    for kind in kinds:
        prompt = prompt_text(kind, target.tokenizer)
        for t in temperatures:
            res = generate_speculative(target, drafter, [prompt], max_new_tokens, k, t,
                                       seed=seed)
            out[f"{kind}@T{t:g}"] = round(alpha_per_slot(res.stats), 4)
    return {"k": k, "max_new_tokens": max_new_tokens, "alpha_per_slot": out}


def evaluate_alpha(target, **kwargs):
    """An ``evaluate`` callback for `train_draft`: `measure_alpha` of the finished draft
    (as a restricted-head drafter) at temperatures 0 and 1."""
    from specsim.drafters import distilled_drafter

    kwargs.setdefault("temperatures", (0.0, 1.0))

    def evaluate(model, head_ids):
        return measure_alpha(target, distilled_drafter(model, target, head_ids=head_ids),
                             **kwargs)
    return evaluate


def default_draft_path(target_name: str, cfg) -> Path:
    """Where the default draft of ``target_name`` lives: under the specsim cache root
    (``$SPECSIM_CACHE``, default ~/.cache/specsim), named by its settings."""
    from specsim.environment import cache_root

    layers = cfg.layers if isinstance(cfg.layers, int) else "-".join(map(str, cfg.layers))
    return cache_root() / "drafts" / (f"{target_name}-distilled-L{layers}-H{cfg.head_vocab}"
                                      f"-S{cfg.steps}-seed{cfg.seed}")


def save_draft(target, out: Path, dcfg, state: dict, frozen: dict, head_ids: np.ndarray, cfg,
               samples, layers, evaluate=None) -> tuple[Path, dict]:
    """Write the draft to a temp folder beside ``out``, evaluate it, add the metadata,
    and rename the folder into place. Returns (out, metadata)."""
    from specsim.models.model import Model
    from specsim.models.hf import save_hf

    params = jax.tree_util.tree_map(np.asarray, full_params(state["trainable"], frozen))
    model = Model(dcfg, params, target.tokenizer, str(out))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        save_hf(model, tmp)
        meta = {
            "format": FORMAT, "target": target.cfg.name, "target_source": target.source,
            "target_vocab_size": target.cfg.vocab_size, "layers_from_target": list(layers),
            "head_vocab": int(len(head_ids)), "head_ids": [int(i) for i in head_ids],
            "settings": {**cfg.identity(), "minutes": cfg.minutes},
            "steps": int(state["step"]), "train_seconds": round(state["seconds"], 1),
            "loss_curve": [round(x, 5) for x in state["losses"]],
            "top1_curve": [round(x, 4) for x in state["top1"]],
            "data": {"prompts": "specsim/data/prompts.jsonl (specsim's shipped prompt set)",
                     "n_prompts": int(len(samples.tokens)), "generated_per_prompt": cfg.n_new,
                     "generated_tokens": int(samples.n_valid.sum()),
                     "sampling": "target samples, alternate rows greedy / temperature 1",
                     "teacher": f"target top-{cfg.teacher_top_k} log-probs at temperature 1",
                     "loss": ("KL(target || draft) over the teacher top-k + a rest bucket, "
                              "on the head vocabulary, renormalised")},
            "seed": cfg.seed, "commit": _commit(), "jax": jax.__version__}
        if evaluate is not None:
            meta["alpha"] = evaluate(model, head_ids)
        (tmp / METADATA_FILE).write_text(json.dumps(meta, indent=1))
        os.chmod(tmp, 0o755)                    # mkdtemp's 0700 would outlive the rename
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out, meta
