"""Files written whole or not at all: a reader, or a user who pressed Ctrl-C, sees the old
file or the new one, never a part.

    atomic.write(path, lambda tmp: fig.savefig(tmp, dpi=120))
    atomic.write_text(path, csv_text)

The writer writes a temporary file beside ``path`` (same folder, so the rename stays on
one file system) and `os.replace` puts it in place; on any exception, KeyboardInterrupt
included, the temporary file is removed and ``path`` is left as it was.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["write", "write_text"]


def write(path: str | Path, writer: Callable[[Path], object]) -> Path:
    """Call ``writer(tmp)`` on a temporary path beside ``path`` (same suffix, so writers
    that pick a format from it still do), then rename it onto ``path``. Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}",
                               dir=path.parent)
    os.close(fd)
    try:
        writer(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def write_text(path: str | Path, text: str) -> Path:
    """``text`` into ``path`` whole or not at all (see `write`)."""
    return write(path, lambda tmp: tmp.write_text(text))
