"""What specsim keeps on disk, listed with sizes and cleared on request (``specsim cache``).

Under the cache root (``$SPECSIM_CACHE``, default ``~/.cache/specsim``):

    gguf-<key>/   a dequantised GGUF model, one per file content (`specsim.models.cache`)
    jax/          JAX's compiled programs (`specsim.compile_cache`; ``$SPECSIM_JAX_CACHE``
                  moves it elsewhere, and it is listed there)
    kernels/      the CPU kernels' shared library (`specsim.models.kernels`)
    drafts/       trained drafters, each an entry (`specsim.train`); slow to remake
    .tmp-*        an unfinished write of a process that was killed

Everything is rebuilt on demand, so clearing never breaks anything; it costs the time
to rebuild (seconds for a model or the kernels, minutes of training for a drafter).
Entries specsim does not know ("other") are listed but cleared only when named.
Clearing renames an entry before deleting it, so an interrupted clear leaves no half-
deleted model that a later load would take for whole. Imports no JAX.
"""

from __future__ import annotations

import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from specsim import compile_cache
from specsim.environment import cache_root
from specsim.errors import InvalidArgument

__all__ = ["KINDS", "CacheEntry", "cache_root", "entries", "select", "total_bytes", "clear",
           "format_bytes"]

KINDS = ("model", "compiled", "kernels", "drafter", "unfinished", "other")


@dataclass(frozen=True)
class CacheEntry:
    """One thing under the cache root: ``kind`` (one of `KINDS`), its path, its size in
    bytes (files under it, symbolic links not followed) and a short description."""

    kind: str
    path: Path
    size: int
    about: str = ""


def _unfinished(name: str) -> bool:
    """A temporary name of specsim's writers (".tmp-*", ".<name>.tmp-*", ".<name>.*.tmp")
    or of an interrupted `clear` (".trash-*")."""
    return name.startswith(".") and (".tmp" in name or name.startswith(".trash-"))


def _size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:              # removed while walking (a concurrent writer)
                pass
    return total


def _model_about(folder: Path) -> str:
    import json
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return "dequantised model (no config.json: damaged, rebuilt on the next load)"
    return f"dequantised model {cfg.get('_name_or_path', '?')} ({cfg.get('torch_dtype', '?')})"


def _classify(path: Path, jax_dir: Path) -> tuple[str, str]:
    name = path.name
    if _unfinished(name):
        return "unfinished", "left by a process that stopped mid-write"
    if path.is_dir() and path.resolve() == jax_dir.resolve():
        return "compiled", "JAX's compiled programs"
    if name == "jax" and path.is_dir():
        return "compiled", "JAX's compiled programs (not the folder in use)"
    if name == "kernels" and path.is_dir():
        return "kernels", "CPU kernels' shared library"
    if path.is_dir() and ((path / "config.json").is_file() or name.startswith("gguf-")):
        return "model", _model_about(path)
    return "other", ""


def _draft_entry(path: Path) -> CacheEntry:
    if _unfinished(path.name):
        kind, about = "unfinished", "left by a process that stopped mid-write"
    elif path.name.endswith(".partial"):
        kind, about = "drafter", "training checkpoint (the same train-draft command resumes it)"
    else:
        kind, about = "drafter", "trained drafter"
    return CacheEntry(kind, path, _size(path), about)


def entries(root: str | Path | None = None) -> list[CacheEntry]:
    """Every entry under ``root`` (default `cache_root`), plus the compiled programs'
    folder where ``$SPECSIM_JAX_CACHE`` puts it elsewhere; each trained drafter under
    ``drafts/`` is an entry of its own. Sorted by kind, then name."""
    root = Path(root) if root is not None else cache_root()
    out = []
    paths = sorted(root.iterdir()) if root.is_dir() else []
    jax_dir = compile_cache.default_dir()
    if jax_dir.is_dir() and jax_dir.resolve().parent != root.resolve():
        paths.append(jax_dir)
    for path in paths:
        if path.name == "drafts" and path.is_dir() and not path.is_symlink():
            out.extend(_draft_entry(draft) for draft in sorted(path.iterdir()))
            continue
        kind, about = _classify(path, jax_dir)
        out.append(CacheEntry(kind, path, _size(path), about))
    return sorted(out, key=lambda e: (KINDS.index(e.kind), str(e.path)))


def total_bytes(items: list[CacheEntry]) -> int:
    return sum(e.size for e in items)


def select(items: list[CacheEntry], kinds: tuple[str, ...] | None) -> list[CacheEntry]:
    """The entries of ``kinds``; with None every kind specsim writes, not "other" (files
    it does not know, e.g. where ``$SPECSIM_CACHE`` names a folder shared with other
    things), which go only when asked for by name. Unknown kinds: InvalidArgument."""
    if kinds is None:
        return [e for e in items if e.kind != "other"]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise InvalidArgument(f"kind must be among {', '.join(KINDS)}, got {', '.join(bad)}")
    return [e for e in items if e.kind in kinds]


def clear(items: list[CacheEntry]) -> int:
    """Delete ``items``; each is first renamed to a ``.trash-*`` name beside it, so an
    interrupted clear leaves an unfinished entry, never a half-deleted one under its own
    name. Returns the bytes freed."""
    freed = 0
    for e in items:
        if not e.path.exists() and not e.path.is_symlink():
            continue
        trash = e.path
        if not _unfinished(e.path.name):
            trash = e.path.with_name(f".trash-{uuid.uuid4().hex[:8]}-{e.path.name}")
            os.replace(e.path, trash)
        if trash.is_dir() and not trash.is_symlink():
            shutil.rmtree(trash)
        else:
            trash.unlink()
        freed += e.size
    return freed


def format_bytes(n: int) -> str:
    """``n`` bytes in decimal units: 512 B, 4.1 kB, 538.2 MB, 2.1 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
