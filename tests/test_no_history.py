"""The repository says what specsim is, not how it was built.

No run numbers (a "session" followed by a number, a ``-sNN`` folder suffix, a bare ``sNN``
tag), no issue numbers, no citation of the old "DESIGN" file under its upper-case name;
commit hashes only where a result names the commit that produced it (``data/``,
``specsim/data/``, ``docs/results.md``, ``docs/studies/``) or a transcription pins its
source (``papers/``). The walk covers every file git tracks or would track (tracked plus
untracked, not ignored), its path as well as its text; a notebook is read as its cells'
sources and text outputs, so cell ids (random hex) are not mistaken for hashes. Each
failure prints ``file:line``.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A run number in prose: "session" or "sessions", then a number (a hyphen or "#" between).
SESSION = re.compile(r"\bsessions?[\s-]*#?\d+", re.IGNORECASE)
# An ordinal run: a number with "st", "nd", "rd" or "th", then "session".
ORDINAL_SESSION = re.compile(r"\b\d+(?:st|nd|rd|th)\s+session\b", re.IGNORECASE)
# An issue number: "issue" or "issues", then a number (a hyphen or "#" between). A line
# that links another project's issue or pull request cites a source, not history.
ISSUE = re.compile(r"\bissues?[\s-]*#?\s*(\d+)", re.IGNORECASE)
LINKED_ISSUE = re.compile(r"https?://\S+/(?:issues|pull)/(\d+)")
# A run tag as a name suffix: a hyphen, a lower-case "s" and two or three digits, as in a
# folder named after the run that wrote it. Lower-case only, so the C++ FFI type names
# (``ffi::S32``) stay out.
RUN_SUFFIX = re.compile(r"-s\d{2,3}(?![\w])")
# A bare run tag in prose: "s" and two or three digits standing alone, in brackets, a path
# or a table cell. Not inside a word or a number (``float32``), and not a name with more
# after it (an underscore or a letter).
BARE_RUN_TAG = re.compile(r"(?<![\w.-])s\d{2,3}(?![\w])")
# XLA's signed-integer element types, as a kernel's C++ comment writes a buffer's type.
XLA_INT_TYPES = {f"s{bits}" for bits in (8, 16, 32, 64)}
C_SOURCES = (".cc", ".h", ".c", ".cpp", ".hpp")
# The formulas' reference is docs/design.md; the upper-case name is the old private file.
OLD_DESIGN = re.compile(r"\bDESIGN\.md\b")

# A commit-like token: 7-40 lower-case hex digits holding at least one digit and one
# letter, standing alone (not part of a longer word or hex run, not the mantissa of a float
# such as ``1.44269504088896341f`` or ``12194440e-4``, not after ``0x``).
HEX_TOKEN = re.compile(r"(?<![\w.])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w.])"
                       r"(?![-+]\d)")
# Where a result may name the commit that produced it: the measurements and their READMEs
# (``data/``, the package's shipped rows under ``specsim/data/``), the study pages; and
# ``papers/``, whose transcriptions cite an external source pinned at its own commit.
HASH_ALLOWED_PREFIXES = ("data/", "specsim/data/", "docs/studies/", "papers/")
HASH_ALLOWED_FILES = {"docs/results.md"}
# The hex digits in order: a made-up content hash in a test fixture, never a commit.
HEX_ALPHABET = "0123456789abcdef"

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not (REPO / ".git").exists(),
    reason="needs a git checkout to list the project's files")


def _project_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, check=True, capture_output=True).stdout
    return sorted({p for p in out.decode().split("\0") if p and (REPO / p).is_file()})


def _notebook_lines(raw: str) -> list[tuple[str, str]]:
    """(where, text) for each line of a notebook's cell sources, text outputs and metadata."""
    nb = json.loads(raw)
    lines = [("metadata", json.dumps(nb.get("metadata", {})))]
    for i, cell in enumerate(nb.get("cells", [])):
        src = cell.get("source", "")
        src = "".join(src) if isinstance(src, list) else src
        for j, line in enumerate(src.splitlines(), 1):
            lines.append((f"cell {i} line {j}", line))
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")]
            texts += [v for k, v in out.get("data", {}).items() if k.startswith("text/")]
            for text in texts:
                text = "".join(text) if isinstance(text, list) else text
                for j, line in enumerate(text.splitlines(), 1):
                    lines.append((f"cell {i} output line {j}", line))
    return lines


def _text_lines(path: str) -> list[tuple[str, str]] | None:
    """(where, text) for each line of a text file, or None for a binary file."""
    try:
        data = (REPO / path).read_bytes()
    except FileNotFoundError:          # removed from the work tree, not yet from the index
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if path.endswith(".ipynb"):
        return _notebook_lines(raw)
    return [(str(n), line) for n, line in enumerate(raw.splitlines(), 1)]


def run_number_hits(path: str, where: str, line: str) -> list[str]:
    """The run and issue numbers one line (or a path, ``where="path"``) holds."""
    found = []
    for pattern in (SESSION, ORDINAL_SESSION, RUN_SUFFIX):
        found += [m.group(0) for m in pattern.finditer(line)]
    if not LINKED_ISSUE.search(line):
        found += [m.group(0) for m in ISSUE.finditer(line)]
    for m in BARE_RUN_TAG.finditer(line):
        if path.endswith(C_SOURCES) and m.group(0) in XLA_INT_TYPES:
            continue
        found.append(m.group(0))
    return found


def commit_hash_hits(path: str, line: str) -> list[str]:
    """Commit-like tokens on a line of a file where no result names its commit."""
    if path.startswith(HASH_ALLOWED_PREFIXES) or path in HASH_ALLOWED_FILES:
        return []
    return [m.group(0) for m in HEX_TOKEN.finditer(line) if m.group(0) not in HEX_ALPHABET]


def _report(hits: list[str], what: str) -> str:
    shown = "\n".join(hits[:400])
    more = f"\n... and {len(hits) - 400} more" if len(hits) > 400 else ""
    return f"{len(hits)} {what}:\n{shown}{more}"


@pytest.fixture(scope="module")
def project_lines() -> list[tuple[str, str, str]]:
    """(path, where, text) for every line of every text file, and each file's path."""
    rows = []
    for path in _project_files():
        rows.append((path, "path", path))
        for where, line in _text_lines(path) or []:
            rows.append((path, where, line))
    return rows


def test_no_run_or_issue_numbers(project_lines):
    hits = []
    for path, where, line in project_lines:
        found = run_number_hits(path, where, line)
        if found:
            hits.append(f"{path}:{where}: {', '.join(found)} | {line.strip()[:160]}")
    assert not hits, _report(hits, "lines name a run or an issue")


def test_commit_hashes_only_where_a_result_names_its_commit(project_lines):
    hits = []
    for path, where, line in project_lines:
        if where == "path":
            continue
        found = commit_hash_hits(path, line)
        if found:
            hits.append(f"{path}:{where}: {', '.join(found)} | {line.strip()[:160]}")
    assert not hits, _report(hits, "lines hold a commit hash outside data/ and docs/ results")


def test_formulas_cite_docs_design(project_lines):
    hits = [f"{path}:{where}: {line.strip()[:160]}" for path, where, line in project_lines
            if where != "path" and OLD_DESIGN.search(line)]
    assert not hits, _report(hits, "lines cite the old design file instead of docs/design.md")



# The patterns themselves, on lines that must and must not match. The examples are built
# with f-strings so this file's own text holds none of them.
@pytest.mark.parametrize("line", [
    f"since session {18} its processes compile", f"Session {29}'s n-gram cell",
    f"sessions {26}-{27}", f"its session-{18} value", f"the {18}th session",
    f"the speedup issue {11} asks for", f"see issue #{12}", f"Issues {11} and {12}",
    f"data/policies-cpu-s{33}/head_ab.py", f"kernel-cpu-s{26}", f"`-s{27}` folders", f"defaults (s{21})",
    f"s{29} → s{30}", f"/tmp/s{32}/grid", f"RATIOS[\"s{33}\"]",
])
def test_run_number_patterns_catch(line):
    assert run_number_hits("specsim/x.py", "1", line)


def test_linked_issues_of_other_projects_are_sources():
    url = f"https://github.com/vllm-project/vllm/issues/{20780}"
    assert not run_number_hits("papers/x.md", "1", f"[vLLM issue {20780}]({url}), PR {5146}")
    assert run_number_hits("papers/x.md", "1", f"vLLM issue {20780} without its link")


@pytest.mark.parametrize("line", [
    'scope="session"', "session-scoped fixtures", "a session of the notebook",
    "np.float32", "dtype=jnp.int32", "f32[8,16]", "--rounds 5", "python -s 30 x",
    "s2 = float(resid @ resid)", "x2, q3, s3, layer", "issue a warning", "rounds 1-5",
    "os32", "s32_table", "data/policies-cpu/README.md",
])
def test_run_number_patterns_pass(line):
    assert not run_number_hits("specsim/x.py", "1", line)


def test_xla_types_allowed_only_in_c_sources():
    line = f"// layer s{32}[]; positions [B, T] s{32}"
    assert not run_number_hits("specsim/models/k.cc", "1", line)
    assert run_number_hits("specsim/models/k.py", "1", line)


@pytest.mark.parametrize("line,expected", [
    (f"commit {'e7ec'}{290}, the int8 run", [f"e7ec{290}"]),
    (f"at {'a84' + '77dc'} and {'1bc'}{2300}", ["a84" "77dc", f"1bc{2300}"]),
    ("const float log2e = 1.44269504088896341f;", []),
    ("c = 0.5 + x * (1.2194440e-4 + x * 1.9875691500e-4)", []),
    ("mask = 0x7f800000", []),
    ("sha = '" + "ab12" * 16 + "'", []),
    ("colour #1f77b4, decade, effaced", []),
    ('folder = root / "gguf-0123456789abcdef"', []),
])
def test_commit_hash_pattern(line, expected):
    assert commit_hash_hits("specsim/x.py", line) == expected
    assert commit_hash_hits("docs/results.md", line) == []
    assert commit_hash_hits("data/demo-cpu/README.md", line) == []

