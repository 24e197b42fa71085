"""``specsim cache``: what the cache root holds, listed with sizes and a total, and cleared
(all kinds specsim writes, or the kinds named), under the root ``$SPECSIM_CACHE`` names."""

from __future__ import annotations

import io
import re
import sys

import pytest

from specsim.cli import main

# Byte counts written below: the listing must add them up exactly.
SIZES = {"gguf-00aa/model.safetensors": 3_000_000, "gguf-00aa/config.json": None,
         "jax/prog-1": 40_000, "jax/nested/prog-2": 2_000, "kernels/lib.so": 123_456,
         "drafts/tiny-distilled-L2/weights": 7_000, "drafts/tiny-distilled-L2.partial/state": 500,
         ".tmp-dead/model.safetensors": 999, "drafts/.tiny-distilled-L2.tmp-x1/w": 77,
         "notes/mine.txt": 11}


@pytest.fixture
def root(tmp_path, monkeypatch):
    root = tmp_path / "cache-root"
    for rel, n in SIZES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if n is None:
            path.write_text('{"_name_or_path": "tiny-model", "torch_dtype": "float32"}')
        else:
            path.write_bytes(b"\0" * n)
    monkeypatch.setenv("SPECSIM_CACHE", str(root))
    monkeypatch.delenv("SPECSIM_JAX_CACHE", raising=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))           # not a terminal
    return root


def _rows(text: str) -> dict[str, tuple[str, str]]:
    """name -> (kind, size) from the listing."""
    rows = re.findall(r"^  (\w+)\s+([\d.]+ k?M?G?B)  (\S+)", text, re.M)
    return {name: (kind, size) for kind, size, name in rows}


def test_list_shows_every_entry_with_its_size_and_the_total(root, capsys):
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    config = len((root / "gguf-00aa" / "config.json").read_bytes())
    assert out.splitlines()[0] == str(root)
    assert _rows(out) == {
        "gguf-00aa": ("model", f"{(3_000_000 + config) / 1e6:.1f} MB"),
        "jax": ("compiled", "42.0 kB"), "kernels": ("kernels", "123.5 kB"),
        "drafts/tiny-distilled-L2": ("drafter", "7.0 kB"),
        "drafts/tiny-distilled-L2.partial": ("drafter", "500 B"),
        ".tmp-dead": ("unfinished", "999 B"),
        "drafts/.tiny-distilled-L2.tmp-x1": ("unfinished", "77 B"), "notes": ("other", "11 B")}
    assert "dequantised model tiny-model (float32)" in out
    total = sum(n for n in SIZES.values() if n) + config
    assert out.splitlines()[-1] == f"total {total / 1e6:.1f} MB in 8 entries"
    assert main(["cache", "list", "--kind", "drafter"]) == 0
    out = capsys.readouterr().out
    assert set(_rows(out)) == {"drafts/tiny-distilled-L2", "drafts/tiny-distilled-L2.partial"}
    assert out.splitlines()[-1] == "total 7.5 kB in 2 entries"


def test_clear_asks_for_yes_and_removes_nothing_without_it(root, capsys):
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    assert main(["cache", "clear"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specsim cache: error: clear would remove 7 entries") and "--yes" in err
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_clear_by_kind_then_all_keeps_what_specsim_did_not_write(root, capsys):
    assert main(["cache", "clear", "--kind", "model", "unfinished", "--yes"]) == 0
    assert "removed 3 entries" in capsys.readouterr().out
    assert sorted(p.name for p in root.iterdir()) == ["drafts", "jax", "kernels", "notes"]
    assert main(["cache", "clear", "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"removed 4 entries under {root}: 173.0 kB freed" in out   # 42 + 123.5 + 7.5 kB
    assert (root / "notes" / "mine.txt").read_bytes() == b"\0" * 11
    assert not any(p.name.startswith(".trash-") for p in root.rglob("*"))
    assert main(["cache", "clear", "--kind", "other", "--yes"]) == 0
    capsys.readouterr()
    assert main(["cache"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "total 0 B in 0 entries"


def test_clear_on_a_terminal_asks_first(root, capsys, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    monkeypatch.setattr(sys, "stdin", Terminal())
    answers = iter(["n", "yes"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert main(["cache", "clear", "--kind", "kernels"]) == 0
    assert "nothing removed" in capsys.readouterr().out and (root / "kernels").is_dir()
    assert main(["cache", "clear", "--kind", "kernels"]) == 0
    assert "removed 1 entry" in capsys.readouterr().out and not (root / "kernels").exists()


def test_a_real_cached_model_is_listed_and_rebuilt_after_clearing(tmp_path, monkeypatch, capsys):
    from specsim.models import Model, init_params
    from specsim.models import cache as disk
    from specsim.models.config import TINY_LLAMA
    monkeypatch.setenv("SPECSIM_CACHE", str(tmp_path / "root"))
    import jax
    cfg = TINY_LLAMA.replace(name="tiny-cached")
    folder = disk.cache_root() / "gguf-0123456789abcdef"
    disk.write(Model(cfg, init_params(jax.random.PRNGKey(0), cfg), None, "t"), folder)
    assert main(["cache"]) == 0
    out = capsys.readouterr().out
    assert _rows(out)["gguf-0123456789abcdef"][0] == "model"
    assert "dequantised model tiny-cached (float32)" in out
    assert main(["cache", "clear", "--kind", "model", "--yes"]) == 0
    assert not folder.exists() and disk.read(folder) is None     # a miss: the load rebuilds
