"""`specsim train-draft`: train a drafter for a target (`specsim.train`): a distilled
draft model, a feature head or Medusa heads. The three kinds share the command's flow
(settings checked before the model loads, an existing result kept, Ctrl-C and the time
budget leaving a checkpoint that the same command resumes); `KINDS` holds what differs."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specsim.cli.arguments import add_command


def add_commands(sub) -> None:
    p = add_command(sub, "train-draft", _cmd_train_draft,
                    help="distil a small draft from the target (on-policy, restricted head)")
    p.add_argument("--target", default="smollm2-135m",
                   help="target model: preset name, HF folder or .gguf (default smollm2-135m)")
    p.add_argument("--kind", choices=("distilled", "feature-head", "medusa"),
                   default="distilled",
                   help="distilled: a few of the target's layers, trained (a draft model); "
                        "feature-head: a small cell on the target's own features "
                        "(EAGLE-style, reaches a higher alpha on this CPU; "
                        "specsim.drafters.feature_head); medusa: K heads on the target's "
                        "last hidden state proposing a token tree "
                        "(specsim.drafters.medusa) (default distilled)")
    p.add_argument("--out", default=None,
                   help="output folder (a .npz file for --kind feature-head) (default: "
                        "under the specsim cache, where the demo looks for it)")
    p.add_argument("--layers", type=int, default=None,
                   help="draft layers: the target's first N, copied then trained (default 2; "
                        "distilled only)")
    p.add_argument("--width", type=int, default=None,
                   help="cell width (feature-head only; default 768)")
    p.add_argument("--heads", type=int, default=None,
                   help="Medusa heads, tokens guessed ahead (medusa only; default 4)")
    p.add_argument("--head-vocab", type=int, default=None,
                   help="tokens in the draft's head, the most frequent of the target's "
                        "samples (default 8192)")
    p.add_argument("--steps", type=int, default=None,
                   help="optimiser steps (default 300; feature-head 1000)")
    p.add_argument("--minutes", type=float, default=None,
                   help="time budget of this call, samples included (default 15)")
    p.add_argument("--batch", type=int, default=None,
                   help="sequences per step (default 8; feature-head: positions, 256)")
    p.add_argument("--prompts", type=int, default=None,
                   help="use only the first N prompts of the set (default all)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--no-eval", action="store_true",
                   help="skip measuring alpha by kind on the finished draft")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


@dataclass(frozen=True)
class Kind:
    """What differs between the kinds of drafter train-draft trains: names in ``module``
    (imported when the command runs, so the parser needs no JAX)."""
    setting: str         # the flag (its dest) only this kind takes
    module: str
    config: str          # the frozen settings class
    default_path: str    # (target name, settings) -> where the demo looks for the result
    train: str           # (target, out, settings, *, progress) -> a result with .finished
    loss: str            # what the result's losses are
    per_slot: str        # the result's held-out field, one number per draft slot ("": none)
    per_slot_label: str


KINDS = {
    "distilled": Kind("layers", "specsim.train", "DistillConfig", "default_draft_path",
                      "train_draft", "KL", "", ""),
    "feature-head": Kind("width", "specsim.train.feature_head", "FeatureHeadConfig",
                         "default_head_path", "train_feature_head", "loss", "alpha_per_slot",
                         "held-out greedy alpha per slot (chain)"),
    "medusa": Kind("heads", "specsim.train.medusa", "MedusaConfig", "default_medusa_path",
                   "train_medusa", "loss", "agreement",
                   "held-out greedy top-1 agreement per head"),
}


def _cmd_train_draft(args) -> int:
    """The target generates from the shipped prompt set (specsim/data/prompts.jsonl); a
    draft made of some of its layers, its frozen embedding and a head over the most
    frequent tokens learns its next-token distributions (KL, optax AdamW).
    Interruptible: Ctrl-C or the time budget leaves a checkpoint in OUT.partial, and the
    same command resumes it."""
    from specsim import models, train

    kind = KINDS[args.kind]
    for name, other in KINDS.items():
        flag = "--" + other.setting.replace("_", "-")
        if name != args.kind and getattr(args, other.setting) is not None:
            raise ValueError(f"{flag} applies to --kind {name} only ({flag} does not apply "
                             f"to --kind {args.kind})")
    module = importlib.import_module(kind.module)
    given = {kind.setting: getattr(args, kind.setting), "head_vocab": args.head_vocab,
             "steps": args.steps, "minutes": args.minutes, "batch": args.batch,
             "n_prompts": args.prompts}
    cfg = getattr(module, kind.config)(seed=args.seed, **{k: v for k, v in given.items()
                                                          if v is not None})
    target = models.load(args.target)
    extra = {}
    if args.kind == "distilled":          # a draft model: its layers come from the target
        cfg.validate(target.cfg.n_layers, target.cfg.vocab_size)
        if not args.no_eval:
            extra["evaluate"] = train.evaluate_alpha(target)
    else:
        cfg.validate(target.cfg.vocab_size)
    out = Path(args.out) if args.out else getattr(module, kind.default_path)(target.cfg.name, cfg)
    if out.is_file() or (out / "config.json").is_file():      # a head file, a draft folder
        print(f"{out} is already trained (delete it to train again)")
        return 0
    try:
        result = getattr(module, kind.train)(target, out, cfg, progress=not args.no_progress,
                                             **extra)
    except KeyboardInterrupt:
        print(f"interrupted: checkpoint in {train.checkpoint_dir(out)}; run the same command "
              f"to resume", file=sys.stderr)
        return 130
    if not result.finished:
        print(f"time budget reached at step {result.step}/{cfg.steps}; checkpoint in "
              f"{train.checkpoint_dir(out)}; run the same command to resume")
        return 0
    print(f"wrote {out} ({result.step} steps, {kind.loss} {result.losses[0]:.3f} -> "
          f"{np.mean(result.losses[-10:]):.3f})")
    if kind.per_slot:
        print(f"  {kind.per_slot_label}: " + " ".join(f"{a:.3f}"
                                                      for a in getattr(result, kind.per_slot)))
    for name, alpha in result.meta.get("alpha", {}).get("alpha_per_slot", {}).items():
        print(f"  alpha_per_slot {name}: {alpha:.3f}")
    return 0
