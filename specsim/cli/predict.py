"""`specsim predict`: will speculation pay on a GPU or TPU? The datasheet what-if of
`specsim.what_if`, no JAX."""

from __future__ import annotations

from specsim.cli.arguments import add_command
from specsim.published import TASK_FAMILIES


def add_commands(sub) -> None:
    p = add_command(sub, "predict", _cmd_predict,
                    help="will speculation pay on a GPU or TPU? (datasheet what-if)")
    p.add_argument("--target", required=True, help="target model preset, e.g. llama-3.1-8b")
    p.add_argument("--hardware", required=True, help="datasheet row, e.g. h100-sxm")
    p.add_argument("--drafter", default="eagle",
                   help="draft_model, eagle, medusa, hydra, ngram, ngram_tree, lookahead "
                        "(default eagle)")
    p.add_argument("--draft", default=None, help="draft model preset (for --drafter draft_model)")
    p.add_argument("--engine", default="vllm",
                   help="hf-eager, vllm, sglang, trtllm, t5x-tpu (default vllm)")
    p.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument("--alpha", type=float, default=None,
                   help="per-token acceptance (chains; default: the median of the drafter "
                        "kind's published chain rows)")
    p.add_argument("--tau", type=float, default=None,
                   help="mean tokens an iteration (at --k, or at --tree-tokens; default for a "
                        "tree: the median of the kind's published tree rows)")
    p.add_argument("--k", type=int, default=None, help="draft length (default: the best K)")
    p.add_argument("--tree-tokens", type=int, default=None,
                   help="tokens a tree verifies, root included (a tree instead of a chain)")
    p.add_argument("--draft-steps", type=int, default=None,
                   help="sequential drafter calls for a tree (default 5)")
    p.add_argument("--context", type=int, default=512, help="tokens in the cache (default 512)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="sampling temperature whose published rows give the default "
                        "acceptance (default 0)")
    p.add_argument("--task", default=None, choices=list(TASK_FAMILIES),
                   help="kind of work whose published rows give the default acceptance "
                        "(default: every task)")


def _cmd_predict(args) -> int:
    """Speedup of speculative decoding for a target model on a datasheet hardware row,
    from the iteration cost model (specsim.iteration_cost) with engine overheads fitted
    on published results: the speedup with an interval, the best K, the batch from which
    it stops paying, and the term that bounds an iteration. No JAX."""
    from specsim.what_if import predict

    pred = predict(args.target, args.hardware, drafter=args.drafter, draft=args.draft,
                   engine=args.engine, batch=args.batch, tp=args.tp, alpha=args.alpha,
                   tau=args.tau, k=args.k, tree_tokens=args.tree_tokens,
                   draft_steps=args.draft_steps, context=args.context,
                   temperature=args.temperature, task=args.task)
    print(pred.summary())
    total = sum(pred.terms.values())
    print("iteration terms (ms): " + ", ".join(f"{name} {1e3 * v:.3f}"
                                                for name, v in pred.terms.items() if v > 0)
          + f"; total {1e3 * total:.3f}")
    return 0

