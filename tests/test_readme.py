"""README.md tells a user the truth: its Python tour runs, its commands are the ones CI
runs, and every file, notebook and command it names exists.

The tour is run as written, except for the one line that loads the real SmolLM2-135M:
the test puts a tiny random Llama (with a small byte-level BPE tokenizer, so the chat
template and the decoded text work as on the real model) in its place, so the tour's
engine calls, pass-cost timing and policy run all execute in seconds.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_LINES = 250
MODEL_LINE = 'target = models.load("smollm2-135m")'


def _text() -> str:
    return README.read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", _text(), flags=re.S | re.M)


def test_readme_is_short():
    n = len(_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines (at most {MAX_LINES})"


def test_the_test_command_is_the_one_ci_runs():
    commands = [b.strip() for b in _blocks("bash")]
    test_command = [c for c in commands if "pytest" in c]
    assert len(test_command) == 1
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert test_command[0] in ci, ".ci/run must run the README's test command byte for byte"
    demo = [c for c in commands if c.endswith("specsim demo")]
    assert len(demo) == 1 and demo[0].startswith("python3 -m venv .venv && ")


def test_every_linked_file_exists():
    targets = re.findall(r"\]\(([^)#\s]+)\)", _text())
    assert targets, "the README links no file"
    missing = [t for t in targets if not t.startswith("http") and not (REPO / t).exists()]
    assert not missing, f"README.md links files that do not exist: {missing}"


def test_every_docs_link_resolves():
    """Relative links in docs/ point at files, and every study page the code, tests,
    notebooks or benchmarks cite by its path under docs/studies/ exists."""
    missing = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        for target in re.findall(r"\]\(([^)#\s]+)\)", page.read_text(encoding="utf-8")):
            if not target.startswith("http") and not (page.parent / target).exists():
                missing.append(f"{page.relative_to(REPO)} -> {target}")
    for folder in ("specsim", "tests", "notebooks", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for cited in re.findall(r"docs/studies/[\w.-]+\.md", path.read_text(encoding="utf-8")):
                if not (REPO / cited).exists():
                    missing.append(f"{path.relative_to(REPO)} cites {cited}")
    assert not missing, "\n".join(missing)


def test_studies_index_lists_every_page():
    studies = REPO / "docs" / "studies"
    index = (studies / "README.md").read_text(encoding="utf-8")
    pages = {p.name for p in studies.glob("*.md")} - {"README.md"}
    listed = set(re.findall(r"\]\(([\w.-]+\.md)\)", index))
    assert pages <= listed, f"study pages missing from docs/studies/README.md: {sorted(pages - listed)}"


def test_design_module_map_names_every_module():
    """docs/design.md's module map names every top-level module and package of specsim
    (as `name` or `name/`)."""
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    root = REPO / "specsim"
    names = {p.stem for p in root.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    missing = sorted(n for n in names if f"`{n}`" not in text and f"`{n}/`" not in text)
    assert not missing, f"modules missing from docs/design.md's module map: {missing}"


def test_every_notebook_is_listed_and_every_listed_one_exists():
    listed = set(re.findall(r"^\| `(\d\d_\w+)` \|", _text(), flags=re.M))
    present = {p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.py")}
    assert listed == present, (f"notebooks missing from README: {sorted(present - listed)}; "
                               f"listed but absent: {sorted(listed - present)}")


def test_every_cli_command_is_in_the_table():
    from specsim.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    listed = set(re.findall(r"^\| `specsim ([a-z-]+)", _text(), flags=re.M))
    assert listed == set(sub.choices), (f"CLI commands {sorted(sub.choices)}, README table "
                                        f"{sorted(listed)}")


def _tiny_target():
    """A tiny random Llama with a real (small, byte-level BPE) tokenizer."""
    import jax
    from tiny_tokenizer import tiny_bpe_tokenizer

    from specsim import models
    from specsim.models.config import TINY_LLAMA
    from specsim.models.transformer import init_params

    tokenizer = tiny_bpe_tokenizer(["write a python function that reverses a list",
                                    "<|im_start|>user", "<|im_start|>assistant"])
    # no end-of-sequence token: every run generates its 48 tokens
    cfg = TINY_LLAMA.replace(name="tiny-readme", vocab_size=tokenizer.vocab_size,
                             max_seq_len=512, eos_token_id=None)
    return models.Model(cfg, init_params(jax.random.PRNGKey(0), cfg), tokenizer, "test")


@pytest.fixture(scope="module")
def tour():
    blocks = _blocks("python")
    assert blocks, "the README has no Python tour"
    source = "\n".join(blocks)
    assert source.count(MODEL_LINE) == 1, f"the tour loads the model in one line: {MODEL_LINE}"
    namespace = {"TINY_TARGET": _tiny_target()}
    exec(compile(source.replace(MODEL_LINE, "target = TINY_TARGET"), str(README), "exec"),
         namespace)
    return namespace


def test_tour_theory_matches_its_comments(tour):
    from specsim import analytic

    assert analytic.expected_tokens(0.8, 4) == pytest.approx((1 - 0.8 ** 5) / 0.2)
    assert analytic.expected_tokens(0.8, 4) == pytest.approx(3.36, abs=5e-3)
    assert analytic.speedup(0.8, 4, 0.05) == pytest.approx(2.8, abs=5e-3)
    be = analytic.break_even_alpha(4, 0.05)
    assert analytic.speedup(be, 4, 0.05) == pytest.approx(1.0)


def test_tour_runs_the_engine(tour):
    res, plain = tour["res"], tour["plain"]
    assert len(res.tokens[0]) == len(plain.tokens[0]) == 48
    assert res.text is not None and isinstance(res.text[0], str)
    # tokens per iteration is accepted + 1, between 1 and K + 1
    assert 1.0 <= res.stats.tokens_per_iteration <= 5.0
    assert res.n_iterations * 5 >= 47
    frame = res.stats.to_frame()
    assert len(frame) == 4


def test_tour_prediction_is_a_finite_speedup(tour):
    for name in ("t_1", "t_verify"):
        assert tour[name] > 0
    assert tour["t_draft"] >= 0
    predicted, measured = float(tour["predicted"]), float(tour["measured"])
    assert np.isfinite(predicted) and predicted > 0
    assert np.isfinite(measured) and measured > 0
    # the closed form at the tour's own numbers
    e = tour["res"].stats.tokens_per_iteration
    expect = e * tour["t_1"] / (4 * tour["t_draft"] + tour["t_verify"])
    assert predicted == pytest.approx(expect)


def test_tour_policy_plans_within_k_max(tour):
    adaptive, plain = tour["adaptive"], tour["plain"]
    assert adaptive.tokens == plain.tokens            # a policy changes speed, not output
    k_used = np.asarray(adaptive.stats.k_used)
    assert k_used.ndim == 2 and k_used.shape[1] == 1
    assert k_used.min() >= 0 and k_used.max() <= 4
