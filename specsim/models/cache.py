"""The disk cache of dequantised checkpoints: a GGUF file read once is kept as a Hugging
Face folder under ``$SPECSIM_CACHE`` (default ``~/.cache/specsim``), keyed by the file's
name, size, mtime and a hash of its first and last MiB, and written atomically (temp
folder + ``os.replace``) so a concurrent or failed write never leaves a partial folder.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["cache_root", "file_key", "cached_folder", "read", "write"]

_CACHE_FORMAT = "hf-fp32-v1"  # bump when the cached folder's contents change meaning


def cache_root() -> Path:
    return Path(os.environ.get("SPECSIM_CACHE", Path.home() / ".cache" / "specsim"))


def file_key(path: Path) -> str:
    """Cache key of a file: its name, size, mtime and a hash of its first/last MiB."""
    st = path.stat()
    h = hashlib.sha256(f"{_CACHE_FORMAT}:{path.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, st.st_size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def cached_folder(path: Path, cache: bool | str | Path = True) -> Path:
    """The cache folder of ``path``: under `cache_root()` (``cache=True``) or ``cache``."""
    root = cache_root() if cache is True else Path(cache)
    return root / f"{path.stem}-{file_key(path)}"


def read(folder: Path, dtype: str | None = None):
    """The cached model in ``folder``, or None when there is none; a damaged folder is
    removed (the caller rebuilds it)."""
    from specsim.models.hf import load_hf

    if not (folder / "config.json").is_file():
        return None
    try:
        return load_hf(folder, dtype=dtype)
    except ValueError:
        shutil.rmtree(folder, ignore_errors=True)
        return None


def write(model, folder: Path) -> None:
    """Save ``model`` as an HF folder at ``folder`` atomically (temp folder beside it,
    then os.replace). A failure (read-only disk, a concurrent writer that won the race)
    leaves no partial folder and does not fail the load."""
    from specsim.models.hf import save_hf

    tmp = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
        save_hf(model, tmp)
        os.replace(tmp, folder)
    except OSError:
        pass
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
