"""What the command groups share: registering a subcommand from the function that runs
it, and reading the draft lengths a user types."""

from __future__ import annotations

import inspect


def add_command(sub, name: str, run, help: str):
    """Register subcommand ``name`` of the ``specsim`` parser ``sub``: ``run(args)`` runs
    it and its docstring is the command's ``--help`` description; ``help`` is the line
    ``specsim --help`` lists. Returns the subcommand's parser, for its arguments."""
    description = inspect.cleandoc(run.__doc__).replace("%", "%%")  # argparse formats %
    parser = sub.add_parser(name, help=help, description=description)
    parser.set_defaults(func=run)
    return parser


def parse_k_values(specs: list[str]) -> list[int]:
    """Draft lengths from CLI words: '1-8' (inclusive range), '1,2,4', '3'; sorted, unique."""
    values: set[int] = set()
    for word in specs:
        for part in filter(None, word.replace(",", " ").split()):
            lo, sep, hi = part.partition("-")
            try:
                a = int(lo)
                b = int(hi) if sep else a
            except ValueError:
                raise ValueError(f"k must be integers or ranges like 1-8 (got {part!r})") from None
            if a < 1 or b < a:
                raise ValueError(f"k must be integers >= 1 and ranges ascending (got {part!r})")
            values.update(range(a, b + 1))
    if not values:
        raise ValueError("k must name at least one draft length")
    return sorted(values)
