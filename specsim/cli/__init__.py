"""The ``specsim`` command line.

One module per group of subcommands, each with ``add_commands(sub)`` registering its
parsers and one small function ``_cmd_<name>(args)`` per command, whose docstring is the
command's ``--help`` description (`arguments.add_command`): `theory` (speedup,
optimal-k), `hardware` (bench, fit), `predict`, `demo`, `training` (train-draft),
`cache`. Heavy imports (JAX, pandas, plotting) happen inside the command that needs them,
so ``specsim speedup`` starts fast and never imports JAX.
"""

from __future__ import annotations

import argparse
import sys

from specsim import compile_cache, interrupt
from specsim.cli import cache, demo, hardware, predict, theory, training
from specsim.cli.arguments import parse_k_values

__all__ = ["build_parser", "main", "parse_k_values"]

COMMAND_GROUPS = (theory, hardware, predict, demo, training, cache)
"""The modules whose subcommands ``specsim`` has, in the order ``--help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specsim",
        description="Speculative decoding: closed-form theory, a compiled JAX engine and "
                    "roofline hardware models, held against each other.")
    from specsim import __version__
    parser.add_argument("--version", action="version", version=f"specsim {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for group in COMMAND_GROUPS:
        group.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    compile_cache.enable_deferred()     # on unless SPECSIM_COMPILATION_CACHE=0 (no JAX import)
    # A command may say what it is doing (args.interrupted) and what it has left on disk
    # (args.done), for the one line that Ctrl-C prints.
    args.interrupted, args.done = "", []
    previous = interrupt.catch()
    try:
        rc = int(args.func(args) or 0)
        interrupt.check()            # a Ctrl-C swallowed inside the command still ends it
        return rc
    except ValueError as err:  # bad input: one clear line, no traceback
        print(f"specsim {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback, the shell's code for SIGINT
        done = "; ".join(args.done) or "nothing written"
        where = f" {args.interrupted}" if args.interrupted else ""
        print(f"specsim {args.command}: interrupted{where}; {done}", file=sys.stderr)
        return 130
    finally:
        interrupt.release(previous)

