"""Distillation: samples → head vocabulary → draft init → optax AdamW loop → saved folder.

    result = train_draft(target, out, DistillConfig(layers=2, head_vocab=8192, steps=300))

Interruptible: the state (trainable parameters, optimiser state, step, loss curve) and
the target's samples live in ``<out>.partial/``, rewritten atomically (temp file +
os.replace) every ``checkpoint_minutes`` and on KeyboardInterrupt; the next call with
the same ``out`` and settings resumes there. The finished draft is written to a temp
folder beside ``out`` and renamed into place, so ``out`` is either absent or complete.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specsim import atomic
from specsim.drafters.distilled import METADATA_FILE
from specsim.train.draft import (distill_loss, draft_config, head_vocabulary, init_draft,
                                 layer_ids)
from specsim.train.samples import Samples, encode_prompts, generate_samples, load_prompts

__all__ = ["DistillConfig", "TrainResult", "train_draft", "checkpoint_dir", "run_budgeted",
           "METADATA_FILE"]



@dataclass(frozen=True, kw_only=True)
class DistillConfig:
    """Settings of one distillation (all that decides its result; saved with it)."""
    layers: int | tuple[int, ...] = 2      # a count (the first N) or target layer ids
    head_vocab: int = 8192                 # FR-Spec head: most frequent tokens
    steps: int = 300                       # optimiser steps (the schedule's length)
    minutes: float | None = 15.0           # wall budget of one call (samples included)
    batch: int = 8                         # sequences per step
    lr: float = 1e-3
    warmup: int = 20
    n_new: int = 96                        # generated tokens per prompt
    gen_batch: int = 16
    teacher_top_k: int = 32
    n_prompts: int | None = None           # None: the whole prompt set
    seed: int = 0
    checkpoint_minutes: float = 3.0

    def validate(self, n_target_layers: int, vocab_size: int) -> None:
        for name in ("steps", "batch", "warmup", "n_new", "gen_batch", "teacher_top_k"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "warmup" else 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.minutes is not None and not (self.minutes > 0):
            raise ValueError(f"minutes must be > 0 (or None for no limit), got {self.minutes!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")
        if not self.checkpoint_minutes > 0:
            raise ValueError(f"checkpoint_minutes must be > 0, got {self.checkpoint_minutes!r}")
        if self.n_prompts is not None and self.n_prompts < 1:
            raise ValueError(f"n_prompts must be >= 1 or None, got {self.n_prompts!r}")
        layer_ids(n_target_layers, self.layers)
        if isinstance(self.head_vocab, bool) or not isinstance(self.head_vocab, int) \
                or not 1 <= self.head_vocab <= vocab_size:
            raise ValueError(f"head_vocab must be an integer in [1, {vocab_size}] (the "
                             f"target's vocabulary), got {self.head_vocab!r}")

    def identity(self) -> dict:
        """The settings a checkpoint must share to be resumed (not the time budget)."""
        d = settings_identity(self)
        d["layers"] = list(d["layers"]) if isinstance(d["layers"], tuple) else d["layers"]
        return d


@dataclass
class TrainResult:
    folder: Path | None                 # the saved draft (None while unfinished)
    step: int
    losses: list[float]
    top1: list[float]
    head_ids: np.ndarray
    finished: bool
    meta: dict = field(default_factory=dict)
    trainable: Any = None               # the trained parameters (see specsim.train.draft)


def settings_identity(cfg) -> dict:
    """A training config's fields without its time budget (``minutes``,
    ``checkpoint_minutes``): what a checkpoint must share to be resumed."""
    d = dataclasses.asdict(cfg)
    for k in ("minutes", "checkpoint_minutes"):
        d.pop(k)
    return d


def checkpoint_dir(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name + ".partial")


def _save_state(ckpt: Path, state: dict) -> None:
    leaves = jax.tree_util.tree_leaves((state["trainable"], state["opt_state"]))
    arrays = {f"a{i}": np.asarray(x) for i, x in enumerate(leaves)}
    atomic.write(ckpt / "state.npz", lambda p: np.savez(p, **arrays))
    info = {k: state[k] for k in ("step", "losses", "top1", "identity", "seconds")}
    atomic.write(ckpt / "progress.json", lambda p: p.write_text(json.dumps(info)))


def _load_state(ckpt: Path, like: dict) -> dict | None:
    if not (ckpt / "progress.json").is_file() or not (ckpt / "state.npz").is_file():
        return None
    info = json.loads((ckpt / "progress.json").read_text())
    if info["identity"] != like["identity"]:
        raise ValueError(f"{ckpt} holds a run with other settings ({info['identity']}); "
                         f"use the same settings to resume or delete the folder")
    treedef = jax.tree_util.tree_structure((like["trainable"], like["opt_state"]))
    with np.load(ckpt / "state.npz") as z:
        leaves = [jnp.asarray(z[f"a{i}"]) for i in range(len(z.files))]
    trainable, opt_state = jax.tree_util.tree_unflatten(treedef, leaves)
    return dict(like, trainable=trainable, opt_state=opt_state, **info)


# ---- data -------------------------------------------------------------------------------------
def _samples(target, cfg: DistillConfig, ckpt: Path, prompts, bar) -> Samples:
    path = ckpt / "samples.npz"
    if path.is_file():
        return Samples.load(path)
    if prompts is None:
        prompts = load_prompts()
    encoded = encode_prompts(prompts, target.tokenizer)
    if cfg.n_prompts is not None:
        encoded = encoded[:cfg.n_prompts]
    bar.reset(total=len(encoded))
    bar.set_description("target samples")
    samples = generate_samples(target, encoded, n_new=cfg.n_new, batch=cfg.gen_batch,
                               top_j=cfg.teacher_top_k, seed=cfg.seed, progress=bar.update)
    atomic.write(path, samples.save)
    return samples


def _batch(samples: Samples, rows: np.ndarray, head_pos: np.ndarray) -> dict:
    """The arrays `distill_loss` takes for ``rows`` of the samples."""
    G = samples.n_generated
    lens = samples.prompt_lens[rows]
    g = np.arange(G)[None]                                                 # [1, G]
    return {"tokens": jnp.asarray(samples.tokens[rows]),
            "pos": jnp.asarray(lens[:, None] - 1 + g, jnp.int32),
            "teacher_head": jnp.asarray(head_pos[samples.teacher_ids[rows]]),
            "teacher_logp": jnp.asarray(samples.teacher_logp[rows]),
            "mask": jnp.asarray(g < samples.n_valid[rows][:, None])}


# ---- the loop ---------------------------------------------------------------------------------
def _optimizer(cfg):
    """AdamW (clipped at global norm 1) on a warmup-cosine schedule from ``cfg.lr``,
    ``cfg.warmup`` and ``cfg.steps``; shared by every training kind."""
    import optax
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, cfg.lr, min(cfg.warmup, max(cfg.steps - 1, 0)), max(cfg.steps, 1), cfg.lr * 0.1)
    return optax.chain(optax.clip_by_global_norm(1.0),
                       optax.adamw(schedule, weight_decay=0.0))


def _make_step(opt, dcfg):
    import optax

    @jax.jit
    def step(trainable, opt_state, frozen, head_ids, batch):
        (loss, aux), grads = jax.value_and_grad(distill_loss, has_aux=True)(
            trainable, frozen, head_ids, dcfg, batch)
        updates, opt_state = opt.update(grads, opt_state, trainable)
        return optax.apply_updates(trainable, updates), opt_state, aux
    return step


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm
    return tqdm(total=total, disable=not enabled, dynamic_ncols=True)


def run_budgeted(state: dict, cfg, ckpt: Path, bar, t_start: float, step_once) -> None:
    """The training loop both trainers share: ``step_once(state)`` (one optimiser step;
    it advances ``state["step"]`` and appends to the curves, and returns the progress
    bar's postfix) until ``cfg.steps`` or the ``cfg.minutes`` budget counted from
    ``t_start``; ``state["seconds"]`` accumulates training time. The state is saved to
    ``ckpt`` every ``cfg.checkpoint_minutes``, when the budget stops the run, and on
    KeyboardInterrupt (re-raised)."""
    last_ckpt = t_run = time.monotonic()
    seconds0 = state["seconds"]
    try:
        while state["step"] < cfg.steps:
            if cfg.minutes is not None and time.monotonic() - t_start > 60 * cfg.minutes:
                break
            postfix = step_once(state)
            state["seconds"] = seconds0 + time.monotonic() - t_run
            bar.set_postfix(**postfix)
            bar.update(1)
            if time.monotonic() - last_ckpt > 60 * cfg.checkpoint_minutes:
                _save_state(ckpt, state)
                last_ckpt = time.monotonic()
    except KeyboardInterrupt:
        _save_state(ckpt, state)
        bar.close()
        raise
    bar.close()
    if state["step"] < cfg.steps:
        _save_state(ckpt, state)


def train_draft(target, out: str | Path, cfg: DistillConfig = DistillConfig(), *,
                prompts=None, progress: bool = True, evaluate=None) -> TrainResult:
    """Distil a draft from ``target`` into the folder ``out`` (see the module docstring).

    ``prompts``: dicts/strings (needs the target's tokenizer) or token-id lists; default
    the shipped set. ``evaluate(model, head_ids) -> dict`` runs on the finished draft and
    its result goes into the metadata (e.g. `measure_alpha`). Returns a `TrainResult`;
    ``finished`` is False when the time budget ran out first (the checkpoint stays, the
    next call resumes)."""
    t_start = time.monotonic()
    out = Path(out)
    cfg.validate(target.cfg.n_layers, target.cfg.vocab_size)
    if out.exists():
        raise ValueError(f"out {out} exists; choose a new folder or delete it")
    ids = layer_ids(target.cfg.n_layers, cfg.layers)
    ckpt = checkpoint_dir(out)
    bar = _progress(0, progress)
    samples = _samples(target, cfg, ckpt, prompts, bar)
    V = target.cfg.vocab_size
    eos = [target.cfg.eos_token_id] if target.cfg.eos_token_id is not None else []
    head_ids = head_vocabulary(samples.generated_tokens() + [samples.tokens[i, :n] for i, n in
                               enumerate(samples.prompt_lens)], V, cfg.head_vocab, eos)
    head_pos = np.full(V, -1, np.int32)
    head_pos[head_ids] = np.arange(len(head_ids), dtype=np.int32)
    dcfg = draft_config(target.cfg, len(ids))
    trainable, frozen = init_draft(target, ids)
    opt = _optimizer(cfg)
    state = {"trainable": trainable, "opt_state": opt.init(trainable), "step": 0, "losses": [],
             "top1": [], "identity": cfg.identity(), "seconds": 0.0}
    state = _load_state(ckpt, state) or state
    step_fn = _make_step(opt, dcfg)
    n = len(samples.tokens)
    head = jnp.asarray(head_ids)
    bar.reset(total=cfg.steps)
    bar.update(state["step"])
    bar.set_description("distilling")

    def step_once(state):
        rng_step = np.random.default_rng([cfg.seed, state["step"]])      # resumable order
        rows = rng_step.choice(n, size=min(cfg.batch, n), replace=False)
        batch = _batch(samples, rows, head_pos)
        t0 = time.monotonic()
        tr, os_, aux = step_fn(state["trainable"], state["opt_state"], frozen, head, batch)
        loss, top1 = float(aux["kl"]), float(aux["top1"])
        state.update(trainable=tr, opt_state=os_, step=state["step"] + 1)
        state["losses"].append(loss)
        state["top1"].append(top1)
        n_tok = int(np.asarray(batch["mask"]).sum())
        return dict(kl=f"{loss:.3f}", top1=f"{top1:.2f}",
                    tok_s=f"{n_tok / max(time.monotonic() - t0, 1e-9):.0f}")

    run_budgeted(state, cfg, ckpt, bar, t_start, step_once)
    if state["step"] < cfg.steps:
        return TrainResult(None, state["step"], state["losses"], state["top1"], head_ids, False,
                           trainable=state["trainable"])
    from specsim.train.save import save_draft
    folder, meta = save_draft(target, out, dcfg, state, frozen, head_ids, cfg, samples,
                              ids, evaluate)
    shutil.rmtree(ckpt, ignore_errors=True)
    return TrainResult(folder, state["step"], state["losses"], state["top1"], head_ids, True,
                       meta, state["trainable"])
