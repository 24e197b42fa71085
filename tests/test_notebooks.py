"""Every notebook runs headless in quick mode; none is committed with outputs.

The kernel is this interpreter (the test virtual environment's python), not whatever
``python3`` kernelspec a user or the system has installed: the tests write a kernelspec
whose argv is ``sys.executable`` into a scratch folder and start kernels from it, and one
test checks inside a running kernel that ``sys.executable`` and ``sys.prefix`` agree.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from jupyter_client.kernelspec import KernelSpecManager  # noqa: E402
from jupyter_client.manager import KernelManager  # noqa: E402
from nbclient import NotebookClient  # noqa: E402
from shared_cache import shared_cache_env  # noqa: E402

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
CELL_TIMEOUT_S = 600          # per cell; a quick-mode notebook takes seconds to a minute
KERNEL_NAME = "specsim-test-python"
SAVE_FIGURE = r'save_figure\(fig, "([\w-]+)", "([\w.-]+)"'
REPO = NOTEBOOK_DIR.parent


@pytest.fixture(scope="module")
def kernel_spec_manager(tmp_path_factory):
    """A kernelspec pointing at this interpreter, in a folder only these tests read."""
    root = tmp_path_factory.mktemp("kernels")
    spec_dir = root / KERNEL_NAME
    spec_dir.mkdir()
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "specsim tests", "language": "python"}))
    return KernelSpecManager(kernel_dirs=[str(root)], ensure_native_kernel=False)


def _execute(nb, ksm, cwd: Path):
    km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=ksm)
    client = NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, kernel_name=KERNEL_NAME,
                            resources={"metadata": {"path": str(cwd)}})
    return client.execute()


def _stream_text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_notebooks_are_numbered_without_gaps():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(1, len(NOTEBOOKS) + 1)]
    assert len(NOTEBOOKS) >= 10


def test_kernel_is_this_interpreter(kernel_spec_manager, tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.executable); print(sys.prefix)"))
    out = _execute(nb, kernel_spec_manager, tmp_path)
    executable, prefix = _stream_text(out.cells[0]).split()
    assert Path(executable).resolve() == Path(sys.executable).resolve()
    assert Path(prefix).resolve() == Path(sys.prefix).resolve()


def test_declared_python3_kernel_resolves_to_this_environment(tmp_path):
    """The notebooks declare kernel "python3"; started the way Jupyter starts it (default
    kernelspec search), it must run in this environment, not a system python."""
    nb = nbformat.v4.new_notebook()
    nb.cells.append(nbformat.v4.new_code_cell("import sys; print(sys.prefix)"))
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    out = client.execute()
    assert Path(_stream_text(out.cells[0]).strip()).resolve() == Path(sys.prefix).resolve()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name}: a code cell has outputs"
            assert cell.execution_count is None, f"{path.name}: a code cell has an execution count"
        assert "attachments" not in cell or not cell.attachments


def test_every_notebook_has_its_percent_script():
    scripts = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))
    assert [p.stem for p in scripts] == [p.stem for p in NOTEBOOKS]
    assert not (NOTEBOOK_DIR / "make_notebooks.py").exists()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_matches_its_percent_script(path):
    """The .py (jupytext "py:percent", the file to edit and review) and the .ipynb hold
    the same cells; refresh the notebook with ``jupytext --sync notebooks/NN_name.py``."""
    jupytext = pytest.importorskip("jupytext")
    script = jupytext.read(path.with_suffix(".py"))
    nb = nbformat.read(path, as_version=4)
    assert script.metadata["jupytext"]["formats"] == "ipynb,py:percent"
    assert nb.metadata.get("jupytext", {}).get("formats") == "ipynb,py:percent"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    pairs = [(c.cell_type, c.source) for c in script.cells]
    assert pairs == [(c.cell_type, c.source) for c in nb.cells], \
        f"{path.name} differs from {path.with_suffix('.py').name}: run jupytext --sync on it"


def _expected_06():
    """Notebook 06 fits the sweep chosen on purpose (not the alphabetically first file),
    bounded by its ceilings, and says which one it used (it runs in notebooks/, so its
    own results/ folder is notebooks/results/)."""
    from specsim import bench
    chosen = bench.choose_sweep(results_dir=NOTEBOOK_DIR / bench.RESULTS_DIR)
    return ["using " + chosen.describe(), "measured ceilings: matmul"]


EXPECTED_OUTPUT = {"06_fit_to_hardware": _expected_06}
EXPECTED_OUTPUT["07_real_models"] = lambda: ["drafter tables read from"]
EXPECTED_OUTPUT["10_policies"] = lambda: ["p_min = 0.4 would have drafted", "i.i.d. closed form"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_in_quick_mode(path, kernel_spec_manager, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSIM_QUICK", "1")
    monkeypatch.setenv("SPECSIM_FIGURES_DIR", str(tmp_path / "figures"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    for name, value in shared_cache_env().items():
        monkeypatch.setenv(name, value)
    nb = nbformat.read(path, as_version=4)
    out = _execute(nb, kernel_spec_manager, NOTEBOOK_DIR)   # raises CellExecutionError on any error
    for cell in out.cells:
        if cell.cell_type == "code":
            for o in cell.outputs:
                assert o.get("output_type") != "error", f"{path.name}: {o.get('ename')}: {o.get('evalue')}"
    text = "".join(_stream_text(c) for c in out.cells if c.cell_type == "code")
    for expected in EXPECTED_OUTPUT.get(path.stem, lambda: ())():
        assert expected in text, f"{path.name} does not say {expected!r}"
    # every figure the notebook saves is regenerated into the scratch folder
    source = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    for paper_id, name in re.findall(SAVE_FIGURE, source):
        written = tmp_path / "figures" / paper_id / name
        assert written.exists() and written.stat().st_size > 1000, f"{path.name} did not write {written}"


def _code(path: Path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_figures_go_to_committed_folder_only_on_request(path):
    """Every save_figure call passes the notebook's REGENERATE_FIGURES flag, committed as
    False: by default figures go to results/figures/, never over papers/."""
    source = _code(path)
    calls = re.findall(r"save_figure\([^)]*\)", source)
    if not calls:
        return
    assert re.search(r"^REGENERATE_FIGURES = False\b", source, re.M), path.name
    for call in calls:
        assert call.endswith("regenerate=REGENERATE_FIGURES)"), f"{path.name}: {call}"


def _tracked_papers() -> dict[str, bytes]:
    import subprocess
    names = subprocess.run(["git", "-C", str(REPO), "ls-files", "papers"], capture_output=True,
                           text=True, check=True).stdout.split()
    return {n: (REPO / n).read_bytes() for n in names if (REPO / n).exists()}


def test_running_a_paper_notebook_leaves_papers_unchanged(kernel_spec_manager, monkeypatch):
    """Notebook 03 run as a user runs it (no SPECSIM_FIGURES_DIR): the committed files under
    papers/ stay byte for byte, and the figure lands in results/figures/ under the
    notebook's working directory."""
    from specsim import papers
    monkeypatch.setenv("SPECSIM_QUICK", "1")
    monkeypatch.delenv("SPECSIM_FIGURES_DIR", raising=False)
    monkeypatch.delenv("SPECSIM_PAPERS_DIR", raising=False)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    before = _tracked_papers()
    path = NOTEBOOK_DIR / "03_chen2023.ipynb"
    (paper_id, name), = re.findall(SAVE_FIGURE, _code(path))
    target = NOTEBOOK_DIR / papers.RESULTS_FIGURES_DIR / paper_id / name   # the kernel's cwd
    target.unlink(missing_ok=True)
    _execute(nbformat.read(path, as_version=4), kernel_spec_manager, NOTEBOOK_DIR)
    assert _tracked_papers() == before
    assert target.exists() and target.stat().st_size > 1000


def test_notebook_06_chooses_its_sweep_on_purpose():
    source = _code(NOTEBOOK_DIR / "06_fit_to_hardware.ipynb")
    assert "bench.choose_sweep(name=SWEEP_NAME)" in source
    assert "fitting.ceiling_bounds(ceilings)" in source and "**bounds" in source
    assert "MEASUREMENTS_DIR.glob" not in source          # no "first file found" choice


def test_notebook_05_uses_the_presets():
    source = _code(NOTEBOOK_DIR / "05_width_vs_depth.ipynb")
    assert "config.LLAMA31_8B" in source and "config.LLAMA32_1B" in source
    assert "ModelConfig(" not in source                   # no hand-copied, tied-head shapes


@pytest.mark.parametrize("stem, controls", [
    ("01_speedup_explorer", ("alpha=", "k=", "c=")),
    ("05_width_vs_depth", ("hardware=", "batch=", "context=")),
    ("06_fit_to_hardware", ("sweep=", "form=")),
])
def test_exploring_notebooks_have_guarded_widgets(stem, controls):
    """Widgets where a user explores, behind an ImportError guard so a headless run
    without ipywidgets still works."""
    source = _code(NOTEBOOK_DIR / f"{stem}.ipynb")
    assert re.search(r"try:\n\s+import ipywidgets as widgets\nexcept ImportError:", source)
    call = source[source.index("widgets.interact("):]
    for control in controls:
        assert control in call, f"{stem}: no {control} control"
