"""The ``specsim`` command line.

Each subcommand lives in one small function ``_cmd_<name>(args)`` and registers its
parser in ``build_parser``. Heavy imports (JAX, pandas, plotting) happen inside the
command that needs them, so ``specsim speedup`` starts fast and never imports JAX.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specsim",
        description="Speculative decoding: closed-form theory, a compiled JAX engine and "
                    "roofline hardware models, held against each other.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    # --- theory (specsim.analytic) -------------------------------------------------------
    # --- hardware (specsim.bench, specsim.fit) -------------------------------------------
    # --- the main job (specsim.experiment) -----------------------------------------------
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as err:  # bad input: one clear line, no traceback
        print(f"specsim {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
