"""The disk cache of dequantised checkpoints: a GGUF file read once is kept as a Hugging
Face folder under ``$SPECSIM_CACHE`` (default ``~/.cache/specsim``), keyed by the file's
content (`file_key`: size, header and tensor index, samples of the tensor data), so every
install of the same file (several virtual environments, a notebook's) shares one copy,
and written atomically (temp folder + ``os.replace``) so a concurrent or failed write
never leaves a partial folder; a damaged folder is removed and rebuilt (`read`).
``specsim cache`` lists and clears what the cache root holds (`specsim.cache_usage`).
"""

from __future__ import annotations

import hashlib
import mmap
import os
import shutil
import struct
import tempfile
from pathlib import Path

from specsim.environment import cache_root

__all__ = ["file_key", "cached_folder", "read", "write"]

_CACHE_FORMAT = "hf-fp32-v1"  # bump when the cached folder's contents change meaning


_MiB = 1 << 20
# GGUF value types -> fixed byte sizes (8: string, 9: array are variable).
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _gguf_index_end(buf, size: int) -> int:
    """Byte offset where a GGUF file's header, metadata and tensor index end (the tensor
    data follows after alignment padding). Raises ValueError/struct.error/IndexError on
    anything that is not a GGUF v2/v3 file."""
    if buf[:4] != b"GGUF":
        raise ValueError("not a GGUF file")
    end = "<" if struct.unpack_from("<I", buf, 4)[0] < 1 << 16 else ">"  # byte order
    u32, u64 = struct.Struct(end + "I"), struct.Struct(end + "Q")
    n_tensors, n_kv = struct.unpack_from(end + "QQ", buf, 8)
    pos = 24

    def string(pos):
        return pos + 8 + u64.unpack_from(buf, pos)[0]

    def value(pos, vtype):
        if vtype in _GGUF_SIZES:
            return pos + _GGUF_SIZES[vtype]
        if vtype == 8:
            return string(pos)
        if vtype == 9:
            item, n = u32.unpack_from(buf, pos)[0], u64.unpack_from(buf, pos + 4)[0]
            pos += 12
            if item in _GGUF_SIZES:
                return pos + n * _GGUF_SIZES[item]
            for _ in range(n):
                pos = value(pos, item)
            return pos
        raise ValueError(f"unknown GGUF value type {vtype}")

    for _ in range(n_kv):
        pos = string(pos)
        pos = value(pos + 4, u32.unpack_from(buf, pos)[0])
    for _ in range(n_tensors):
        pos = string(pos)
        pos += 4 + 8 * u32.unpack_from(buf, pos)[0] + 4 + 8   # dims, type, offset
    if pos > size:
        raise ValueError("GGUF index runs past the end of the file")
    return pos


def file_key(path: Path) -> str:
    """Cache key of a GGUF file by its content, not where it is installed or when: its
    size, its header (metadata and tensor index) and the first and last MiB of its
    tensor data, so every install of the same file shares one cached folder. A file
    that is not a GGUF is keyed by its size and first and last MiB."""
    size = path.stat().st_size
    h = hashlib.sha256(f"{_CACHE_FORMAT}:{size}".encode())
    with open(path, "rb") as f:
        if size == 0:
            return h.hexdigest()[:16]
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            try:
                start = _gguf_index_end(buf, size)
            except (ValueError, IndexError, struct.error):
                start = 0
            h.update(buf[:start])
            h.update(buf[start:start + _MiB])
            h.update(buf[max(start, size - _MiB):])
    return h.hexdigest()[:16]


def cached_folder(path: Path, cache: bool | str | Path = True) -> Path:
    """The cache folder of ``path``: under `cache_root()` (``cache=True``) or ``cache``,
    named by its content (`file_key`), not its name or install path."""
    root = cache_root() if cache is True else Path(cache)
    return root / f"gguf-{file_key(path)}"


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
