"""`specsim cache`: list (with sizes) or clear what specsim keeps on disk
(`specsim.cache_usage`)."""

from __future__ import annotations

import sys

from specsim.cli.arguments import add_command


def add_commands(sub) -> None:
    from specsim.cache_usage import KINDS

    p = add_command(sub, "cache", _cmd_cache,
                    help="list (with sizes) or clear what specsim keeps on disk")
    p.add_argument("action", nargs="?", choices=("list", "clear"), default="list",
                   help="list (default) or clear")
    p.add_argument("--kind", nargs="+", choices=KINDS, default=None,
                   help="only these kinds (clear: default all but 'other', files specsim "
                        "did not write, removed only when named)")
    p.add_argument("--yes", action="store_true", help="clear without asking")


def _cmd_cache(args) -> int:
    """Lists what specsim keeps under its cache root ($SPECSIM_CACHE, default
    ~/.cache/specsim) with sizes and the total: dequantised models (one per GGUF file's
    content, shared by every install), JAX's compiled programs, the CPU kernels, trained
    drafters, unfinished writes. 'clear' removes them (every kind specsim writes, or the
    --kind given); each is rebuilt when next needed."""
    from specsim import cache_usage as cu

    root = cu.cache_root()
    items = cu.entries(root)
    fmt = cu.format_bytes

    def count(n: int) -> str:
        return f"{n} entr{'y' if n == 1 else 'ies'}"

    def show(chosen):
        for e in chosen:
            name = e.path.relative_to(root) if e.path.is_relative_to(root) else e.path
            print(f"  {e.kind:<10} {fmt(e.size):>9}  {name}  {e.about}".rstrip())

    if args.action == "list":
        chosen = cu.select(items, tuple(args.kind)) if args.kind else items
        print(f"{root}" + ("" if root.is_dir() else " (not created yet)"))
        show(chosen)
        print(f"total {fmt(cu.total_bytes(chosen))} in {count(len(chosen))}")
        return 0
    chosen = cu.select(items, tuple(args.kind) if args.kind else None)
    if not chosen:
        print(f"{root}: nothing to clear")
        return 0
    size = fmt(cu.total_bytes(chosen))
    if not args.yes:
        if not sys.stdin.isatty():
            raise ValueError(f"clear would remove {count(len(chosen))} ({size}) under "
                             f"{root}; add --yes to remove them without a question")
        show(chosen)
        if input(f"remove {count(len(chosen))} ({size})? [y/N] ").strip().lower() \
                not in ("y", "yes"):
            print("nothing removed")
            return 0
    args.done, freed = ["nothing removed"], 0
    for i, e in enumerate(chosen, start=1):
        args.interrupted = f"removing {e.path}"
        freed += cu.clear([e])
        args.done = [f"removed {i} of {count(len(chosen))} ({fmt(freed)})"]
    print(f"removed {count(len(chosen))} under {root}: {fmt(freed)} freed")
    return 0

