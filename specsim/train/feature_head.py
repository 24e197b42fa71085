"""Training the feature-head drafter (`specsim.drafters.feature_head`) on the target's
own samples and features.

    result = train_feature_head(target, "head.npz", FeatureHeadConfig(minutes=8))

The target generates from the shipped prompt set (`specsim.train.samples`, the same
on-policy samples the distilled draft learns from), one more pass over each sample
gives its final-normed features ĥ [N, T, D], and the cell learns, unrolled J steps
from every generated position t (teacher forcing the tokens, not the features):

    loss = Σ_j CE(p_target(· | ≤ t+j), softmax(z_j · Eₕᵀ)) + λ · |z_j − ĥ_{t+j}|₁

(EAGLE's pair: the target's next-token distribution, its top-k kept with the samples,
and the feature it would have).
Rows 0, 2, 4, … of the samples are greedy continuations, so the held-out greedy rows
give α per draft slot directly: the cell runs free from ĥ_t (its own drafts as inputs)
and a slot counts as accepted when it and every earlier slot match the target.

Interruptible: samples, features and the optimiser state live in ``<out>.partial/``
(atomic writes, every ``checkpoint_minutes`` and on KeyboardInterrupt); the next call
with the same settings resumes. The head file is written atomically, so ``out`` is
either absent or complete.

Shapes: N samples, T positions, G generated per sample, D model, W cell width,
Vh head vocabulary, J unrolled steps, M examples per batch.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from specsim.drafters.feature_head import cell, init_cell, save_cell
from specsim.train.draft import head_vocabulary
from specsim.train.loop import _optimizer, checkpoint_dir, settings_identity

__all__ = ["FeatureHeadConfig", "FeatureHeadResult", "train_feature_head", "target_features",
           "chain_alpha", "default_head_path", "checkpoint_dir"]


@dataclass(frozen=True, kw_only=True)
class FeatureHeadConfig:
    """Settings of one feature-head training (all that decides its result)."""
    width: int = 768                 # cell width W (fp16 file < 5 MiB at D = 576)
    head_vocab: int = 8192           # FR-Spec head: most frequent tokens of the samples
    unroll: int = 5                  # J: draft slots trained per example
    steps: int = 1000
    batch: int = 256                 # examples (generated positions) per step
    lr: float = 2e-3
    warmup: int = 50
    feature_weight: float = 1.0      # λ
    holdout: int = 30                # samples kept out for α
    n_new: int = 96                  # generated tokens per prompt
    gen_batch: int = 16
    teacher_top_k: int = 8           # the target's top-k kept per position (soft targets)
    n_prompts: int | None = None
    seed: int = 0
    minutes: float | None = 15.0     # wall budget of one call (samples included)
    checkpoint_minutes: float = 3.0

    def validate(self, vocab_size: int) -> None:
        validate_head_training(self, vocab_size, ("width", "unroll"))
        if not self.feature_weight >= 0:
            raise ValueError(f"feature_weight must be >= 0, got {self.feature_weight!r}")

    def identity(self) -> dict:
        return settings_identity(self)


def validate_head_training(cfg, vocab_size: int, own_counts: tuple[str, ...]) -> None:
    """The checks a head training's settings share (the feature head's and Medusa's):
    ``own_counts`` and the shared counts positive integers, ``head_vocab`` inside the
    target's vocabulary, positive budgets and rate, at least 2 prompts (one held out)."""
    for name in own_counts + ("steps", "batch", "n_new", "gen_batch", "teacher_top_k"):
        v = getattr(cfg, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if isinstance(cfg.head_vocab, bool) or not isinstance(cfg.head_vocab, int) \
            or not 1 <= cfg.head_vocab <= vocab_size:
        raise ValueError(f"head_vocab must be an integer in [1, {vocab_size}] (the "
                         f"target's vocabulary), got {cfg.head_vocab!r}")
    if cfg.minutes is not None and not cfg.minutes > 0:
        raise ValueError(f"minutes must be > 0 (or None for no limit), got {cfg.minutes!r}")
    for name in ("lr", "checkpoint_minutes"):
        if not getattr(cfg, name) > 0:
            raise ValueError(f"{name} must be > 0, got {getattr(cfg, name)!r}")
    if cfg.n_prompts is not None and cfg.n_prompts < 2:
        raise ValueError(f"n_prompts must be >= 2 or None, got {cfg.n_prompts!r}")


@dataclass
class FeatureHeadResult:
    path: Path | None                 # the saved head (None while unfinished)
    step: int
    losses: list[float]
    alpha_per_slot: list[float]       # held-out greedy α per slot (chain), empty if unfinished
    finished: bool
    meta: dict = field(default_factory=dict)


def target_features(target, tokens: np.ndarray, batch: int = 16) -> np.ndarray:
    """The target's final-normed features of whole sequences: tokens [N, T] → [N, T, D]."""
    from specsim.models.transformer import forward_hidden, init_cache

    cfg = target.cfg

    @jax.jit
    def run(params, toks):
        return forward_hidden(params, cfg, toks, init_cache(cfg, toks.shape[0], toks.shape[1]))[0]

    out = []
    for i in range(0, len(tokens), batch):
        rows = tokens[i:i + batch]
        pad = batch - len(rows)
        arr = np.concatenate([rows, np.repeat(rows[-1:], pad, 0)]) if pad else rows
        out.append(np.asarray(run(target.params, jnp.asarray(arr)))[:len(rows)])
    return np.concatenate(out)


# ---- examples --------------------------------------------------------------------------------
class _Data:
    """Host arrays and the (row, position, generated index) of every example whose J
    later tokens are valid."""

    def __init__(self, samples, feats, head_pos, rows, J):
        self.s, self.h, self.head_pos, self.J = samples, feats, head_pos, J
        ex = [(r, samples.prompt_lens[r] - 1 + g, g) for r in rows
              for g in range(0, int(samples.n_valid[r]) - J)]
        self.ex = np.asarray(ex, np.int64).reshape(-1, 3)

    def arrays(self, idx):
        """z0 [M, D], tokens x_{t+1..t+J} [M, J], features ĥ_{t+1..t+J} [M, J, D], and
        the target's top-Jt next-token choices at t+1..t+J: head indices (−1 outside
        the head) [M, J, Jt] and log-probabilities [M, J, Jt]; index 0 is its argmax."""
        r, t, g = self.ex[idx].T
        j = np.arange(1, self.J + 1)[None]
        ids = self.s.teacher_ids[r[:, None], g[:, None] + j]                   # [M, J, Jt]
        return (jnp.asarray(self.h[r, t]), jnp.asarray(self.s.tokens[r[:, None], t[:, None] + j]),
                jnp.asarray(self.h[r[:, None], t[:, None] + j]),
                jnp.asarray(self.head_pos[ids]),
                jnp.asarray(self.s.teacher_logp[r[:, None], g[:, None] + j]))


def teacher_cross_entropy(logq, teacher_head, teacher_logp):
    """Cross-entropy of the draft's log-probabilities logq [M, ..., Vh] against the
    target's top-Jt choices (head indices, −1 outside the head, [M, ..., Jt], and their
    log-probabilities), renormalised over the tokens inside the head and averaged over
    the M examples that have one. → [...]"""
    inside = teacher_head >= 0
    p = jnp.where(inside, jnp.exp(teacher_logp), 0.0)
    z_p = p.sum(-1, keepdims=True)
    p = p / jnp.maximum(z_p, 1e-30)
    picked = jnp.take_along_axis(logq, jnp.maximum(teacher_head, 0), -1)     # [M, ..., Jt]
    ok = z_p[..., 0] > 0                                                     # [M, ...]
    return -jnp.sum(jnp.where(ok, jnp.sum(p * picked, -1), 0.0), 0) / jnp.maximum(ok.sum(0), 1)


def _loss(params, embed, head, eps, lam, z0, toks, feats, teacher_head, teacher_logp):
    """Cross-entropy of the draft against the target's top-Jt distribution (renormalised
    over the tokens inside the head) plus λ·L1 to the target's features, summed over
    the J unrolled slots. → (loss, cross-entropy part)."""
    z, ce, fl = z0, 0.0, 0.0
    for j in range(toks.shape[1]):
        z = cell(params, embed, z, toks[:, j], eps)
        logq = jax.nn.log_softmax(z @ head.T, -1)                              # [M, Vh]
        ce = ce + teacher_cross_entropy(logq, teacher_head[:, j], teacher_logp[:, j])
        fl = fl + jnp.mean(jnp.abs(z - feats[:, j]))
    return ce + lam * fl, ce


def chain_alpha(params, embed, head, head_ids, eps, data: _Data) -> list[float]:
    """Held-out greedy α per slot along the free-running chain (see module docstring):
    slot j's acceptance given slots < j were accepted, over the greedy rows."""
    greedy = data.ex[:, 0] % 2 == 0
    idx = np.flatnonzero(greedy)
    if not len(idx):
        return []
    z, toks, _, teacher_head, _ = data.arrays(idx)
    labels = teacher_head[..., 0]                                             # argmax
    hid = jnp.asarray(head_ids)

    @jax.jit
    def run(z, x):
        outs = []
        for _ in range(toks.shape[1]):
            z = cell(params, embed, z, x, eps)
            x = hid[jnp.argmax(z @ head.T, -1)]
            outs.append(x)
        return jnp.stack(outs, 1)

    drafts = np.asarray(run(z, toks[:, 0]))                                    # [M, J]
    want = np.asarray(head_ids)[np.maximum(np.asarray(labels), 0)]
    hit = np.cumprod((drafts == want) & (np.asarray(labels) >= 0), 1)
    reached = np.concatenate([[len(hit)], hit.sum(0)[:-1]])
    return [round(float(a), 4) for a in hit.sum(0) / np.maximum(reached, 1)]


# ---- the loop --------------------------------------------------------------------------------
def _prepare(target, cfg: FeatureHeadConfig, ckpt: Path, prompts, bar):
    """Samples (cached in the checkpoint folder), features, head vocabulary, splits."""
    from specsim import atomic
    from specsim.train.loop import _samples
    samples = _samples(target, cfg, ckpt, prompts, bar)
    fpath = ckpt / "features.npy"
    if fpath.is_file():
        feats = np.load(fpath)
    else:
        bar.set_description("target features")
        feats = target_features(target, samples.tokens, cfg.gen_batch)
        atomic.write(fpath, lambda p: np.save(p, feats))
    V = target.cfg.vocab_size
    eos = [target.cfg.eos_token_id] if target.cfg.eos_token_id is not None else []
    head_ids = head_vocabulary(samples.generated_tokens(), V, cfg.head_vocab, eos)
    head_pos = np.full(V, -1, np.int32)
    head_pos[head_ids] = np.arange(len(head_ids), dtype=np.int32)
    order = np.random.default_rng(cfg.seed).permutation(len(samples.tokens))
    n_hold = min(cfg.holdout, len(order) // 2)
    train = _Data(samples, feats, head_pos, np.sort(order[n_hold:]), cfg.unroll)
    held = _Data(samples, feats, head_pos, np.sort(order[:n_hold]), cfg.unroll)
    if not len(train.ex):
        raise ValueError(f"no training examples: the samples need more than unroll = "
                         f"{cfg.unroll} valid generated tokens")
    return samples, head_ids, train, held


@dataclass
class HeadTraining:
    """What a head training (the feature head's or Medusa's) starts from: the target's
    name, the checked ``out`` file, its checkpoint folder, the progress bar, the target's samples split
    into training and held-out examples, and the target's output head restricted to the
    draft's vocabulary ``head`` [Vh, D] (rows ``head_ids``)."""
    target_name: str
    out: Path
    ckpt: Path
    bar: object
    samples: object
    head_ids: np.ndarray
    train: _Data
    held: _Data
    head: jax.Array


def start_head_training(target, out: str | Path, cfg, prompts, progress: bool,
                        what: str) -> HeadTraining:
    """Check ``cfg`` and ``out`` (a new .npz file), then sample the target (or take the
    samples the checkpoint folder holds) and build the `HeadTraining`; ``what`` names the
    head in the error a target without an embedding gets."""
    from specsim.train.loop import _progress

    out = Path(out)
    cfg.validate(target.cfg.vocab_size)
    if out.suffix != ".npz":
        raise ValueError(f"out must be a .npz file path, got {out}")
    if out.exists():
        raise ValueError(f"out {out} exists; choose a new path or delete it")
    tcfg = target.cfg
    if "embed" not in target.params:
        raise ValueError(f"{tcfg.name} has no embedding to share with {what}")
    ckpt = checkpoint_dir(out)
    bar = _progress(0, progress)
    samples, head_ids, train, held = _prepare(target, cfg, ckpt, prompts, bar)
    head_w = target.params["embed"] if tcfg.tie_embeddings else \
        jnp.asarray(target.params["lm_head"]).T
    return HeadTraining(tcfg.name, out, ckpt, bar, samples, head_ids, train, held,
                        head_w[jnp.asarray(head_ids)])


def initial_state(run: HeadTraining, cfg, params, opt, description: str) -> dict:
    """The training state of a head: fresh from ``params`` and the optimiser ``opt``, or
    the one the checkpoint folder holds for the same settings; the progress bar set to
    ``cfg.steps`` at its step."""
    from specsim.train.loop import _load_state

    state = {"trainable": params, "opt_state": opt.init(params), "step": 0, "losses": [],
             "top1": [], "identity": cfg.identity(), "seconds": 0.0}
    state = _load_state(run.ckpt, state) or state
    run.bar.reset(total=cfg.steps)
    run.bar.update(state["step"])
    run.bar.set_description(description)
    return state


def curve(values: list[float], steps: int) -> list[float]:
    """A training curve thinned to about 100 points, for a head file's metadata."""
    return [round(x, 4) for x in values[::max(1, steps // 100)]]


def save_head(run: HeadTraining, cfg, state: dict, prompts, save, *, data: dict,
              **extra) -> dict:
    """Write the finished head with ``save(out, params, head_ids, meta)`` and remove its
    checkpoint folder. The metadata (returned): target, settings, steps, training time,
    the data it learnt from (plus ``data``), its loss curve, plus ``extra``."""
    meta = {"target": run.target_name, "config": cfg.identity(), "steps": state["step"],
            "seconds": round(state["seconds"], 1),
            "data": {"prompts": "specsim/data/prompts.jsonl" if prompts is None else "given",
                     "samples": int(len(run.samples.tokens)),
                     "train_examples": int(len(run.train.ex)), **data},
            "loss_curve": curve(state["losses"], cfg.steps), **extra}
    save(run.out, state["trainable"], run.head_ids, meta)
    shutil.rmtree(run.ckpt, ignore_errors=True)
    return meta


def train_feature_head(target, out: str | Path, cfg: FeatureHeadConfig = FeatureHeadConfig(),
                       *, prompts=None, progress: bool = True) -> FeatureHeadResult:
    """Train a feature head for ``target`` into the file ``out`` (.npz; see the module
    docstring). Returns a `FeatureHeadResult`; ``finished`` is False when the time budget
    ran out first (the checkpoint stays and the next call resumes)."""
    import optax
    from specsim.train.loop import run_budgeted

    t_start = time.monotonic()
    run = start_head_training(target, out, cfg, prompts, progress, "a feature head")
    tcfg, train, head = target.cfg, run.train, run.head                     # head [Vh, D]
    embed = target.params["embed"]
    eps, lam = float(tcfg.norm_eps), float(cfg.feature_weight)
    opt = _optimizer(cfg)
    state = initial_state(run, cfg, init_cell(jax.random.PRNGKey(cfg.seed), tcfg.d_model,
                                              cfg.width), opt, "feature head")

    @jax.jit
    def step(params, opt_state, *batch):
        (loss, ce), grads = jax.value_and_grad(_loss, has_aux=True)(
            params, embed, head, eps, lam, *batch)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, ce

    def step_once(state):
        rng = np.random.default_rng([cfg.seed, state["step"]])              # resumable order
        idx = rng.integers(0, len(train.ex), cfg.batch)
        t0 = time.monotonic()
        p, o, loss, ce = step(state["trainable"], state["opt_state"], *train.arrays(idx))
        state.update(trainable=p, opt_state=o, step=state["step"] + 1)
        state["losses"].append(float(loss))
        state["top1"].append(float(ce))                       # slot kept: the CE part
        return dict(loss=f"{float(loss):.3f}", ce=f"{float(ce):.3f}",
                    ex_s=f"{cfg.batch / max(time.monotonic() - t0, 1e-9):.0f}")

    run_budgeted(state, cfg, run.ckpt, run.bar, t_start, step_once)
    if state["step"] < cfg.steps:
        return FeatureHeadResult(None, state["step"], state["losses"], [], False)
    alpha = chain_alpha(state["trainable"], embed, head, run.head_ids, eps, run.held)
    meta = save_head(run, cfg, state, prompts, save_cell, data={
        "holdout_samples": int(len(np.unique(run.held.ex[:, 0]))),
        "generated_per_prompt": cfg.n_new,
        "rows": "even rows greedy, odd rows temperature 1 (target's own samples)"},
        ce_curve=curve(state["top1"], cfg.steps), alpha_per_slot_heldout_greedy=alpha)
    return FeatureHeadResult(run.out, state["step"], state["losses"], alpha, True, meta)


def default_head_path(target_name: str, cfg: FeatureHeadConfig) -> Path:
    """Where the default feature head of ``target_name`` lives: under the specsim cache
    root (``$SPECSIM_CACHE``, default ~/.cache/specsim), named by its settings."""
    from specsim.environment import cache_root
    return cache_root() / "drafts" / (f"{target_name}-feature-head-W{cfg.width}-"
                                      f"H{cfg.head_vocab}-S{cfg.steps}-seed{cfg.seed}.npz")
