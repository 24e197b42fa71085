"""data/ holds only what something reads, each folder says what it is, and the package's
own data (specsim/data/) is declared for the wheel and regenerates where it is generated.

A folder of data/ is referenced when its path, ``data/<folder>``, appears in the
package, the tests (this file aside), the notebooks, papers/, benchmarks/ or
docs/results.md; code that joins ``"data" / "<folder>"`` counts too."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"
PACKAGE_DATA = ROOT / "specsim" / "data"
READERS = ("specsim", "tests", "notebooks", "papers", "benchmarks")
READER_FILES = ("docs/results.md",)
TEXT = {".py", ".md", ".ipynb", ".sh", ".toml", ".txt", ".cc", ".h", ".json", ".csv"}


def _data_folders() -> list[str]:
    return sorted(p.relative_to(DATA).as_posix() for p in DATA.rglob("*")
                  if p.is_dir() and "__pycache__" not in p.parts)


def _reader_text() -> str:
    files = [p for top in READERS for p in (ROOT / top).rglob("*")
             if p.is_file() and p.suffix in TEXT and "__pycache__" not in p.parts
             and p != Path(__file__).resolve() and not p.is_relative_to(PACKAGE_DATA / "drafts")]
    files += [ROOT / f for f in READER_FILES if (ROOT / f).is_file()]
    text = "\n".join(p.read_text(errors="replace") for p in files)
    return re.sub(r"\"\s*/\s*\"", "/", text)        # "data" / "demo-cpu" -> "data/demo-cpu"


def test_every_data_folder_is_read_by_something():
    text = _reader_text()
    unread = [f for f in _data_folders() if not re.search(rf"\bdata/{re.escape(f)}(?![\w-])", text)]
    assert not unread, (f"data/ folders nothing references: {unread}; delete them (git "
                        f"history keeps them) or cite them where they are read")


def test_every_data_folder_has_a_readme():
    missing = [f for f in ["", *_data_folders()] if not (DATA / f / "README.md").is_file()]
    assert not missing, f"data/ folders without a README.md: {missing}"


def test_data_readme_lists_every_folder():
    readme = (DATA / "README.md").read_text()
    top = [f for f in _data_folders() if "/" not in f]
    assert all(f"`{f}/`" in readme for f in top), [f for f in top if f"`{f}/`" not in readme]


def test_no_folder_is_named_after_a_run():
    named = [f for f in _data_folders() if re.search(r"-s\d{2,3}$|-r\d+$|-\d+$", f)]
    assert not named, named


def test_package_data_is_declared_for_the_wheel():
    """Every file under specsim/data/ matches a package-data pattern, so a wheel holds it
    (tests/test_install.py builds one and checks the same files are in it)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = config["package-data"]["specsim"]
    files = [p.relative_to(ROOT / "specsim").as_posix() for p in PACKAGE_DATA.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts]
    assert files
    undeclared = [f for f in files if not any(fnmatch.fnmatch(f, pat) for pat in patterns)]
    assert not undeclared, undeclared
    readme = (PACKAGE_DATA / "README.md").read_text()
    for f in files:
        assert Path(f).name.split("-ceilings")[0].split(".")[0] in readme, f


def test_the_package_reads_its_data_through_resources():
    """No module reaches into the source tree for data (an installed package has no
    data/ beside it)."""
    offenders = []
    for path in (ROOT / "specsim").rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"parents\[\d\]\s*/\s*\"data\"|parent\.parent\s*/\s*\"data\"", line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}")
    assert not offenders, offenders


def test_make_prompts_reproduces_the_shipped_set(tmp_path):
    out = tmp_path / "prompts.jsonl"
    got = subprocess.run([sys.executable, str(DATA / "prompts" / "make_prompts.py"), "--out",
                          str(out)], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0, got.stderr
    assert out.read_bytes() == (PACKAGE_DATA / "prompts.jsonl").read_bytes()
