"""Ctrl-C: the command line prints one line on stderr (what was interrupted, what is on
disk), exits 130 with no traceback, and leaves no half-written file."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specsim import atomic
from specsim.cli import main
from shared_cache import shared_cache_env

ROOT = Path(__file__).resolve().parent.parent


def _lines(stream, q):
    for line in stream:
        q.put(line)
    q.put(None)


def test_ctrl_c_during_the_demo_is_one_line_exit_130_and_no_files(tmp_path):
    out = tmp_path / "demo"
    env = dict(os.environ, PYTHONUNBUFFERED="1", SPECSIM_CACHE=str(tmp_path / "cache"),
               SPECSIM_COMPILATION_CACHE="0")
    # the shared cache lies outside tmp_path: the eager ops of building the model before
    # the first step are read back, not compiled again
    env.update(shared_cache_env())
    from specsim.models import kernels
    if kernels.available():     # the kernel library this process loaded, so that the demo
        built = kernels.library_path()  # starts without building it again (~10 s of C++)
        (tmp_path / "cache" / "kernels").mkdir(parents=True)
        shutil.copy2(built, tmp_path / "cache" / "kernels" / built.name)
    cmd = [sys.executable, "-m", "specsim.cli", "demo", "--quick", "--target", "tiny-llama",
           "--no-progress", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)
    stdout = queue.Queue()
    threading.Thread(target=_lines, args=(proc.stdout, stdout), daemon=True).start()
    seen = []
    try:
        while True:          # wait until the demo is at work on its first step
            line = stdout.get(timeout=900)
            assert line is not None, f"the demo ended before its first step: {seen}"
            seen.append(line)
            if line.startswith("1/"):
                break
        proc.send_signal(signal.SIGINT)
        err = proc.stderr.read()
        rc = proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 130, err
    assert "Traceback" not in err and "Error" not in err, err
    # One line says it all (a warning of the machine's own, e.g. no C++ compiler for the
    # CPU kernels, may come before it).
    assert [ln for ln in lines if "interrupted" in ln] == lines[-1:], err
    assert lines[-1].startswith(f"specsim demo: interrupted during {seen[-1].strip()[:-4]}")
    assert lines[-1].endswith(f"nothing written to {out}/ (written whole at the end)")
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]    # no temporary folder


def test_ctrl_c_while_a_figure_is_written_leaves_no_part_of_it(tmp_path, capsys, monkeypatch):
    from matplotlib.figure import Figure

    def half_then_ctrl_c(self, path, **kw):
        Path(path).write_bytes(b"\x89PNG half a figure")
        raise KeyboardInterrupt
    monkeypatch.setattr(Figure, "savefig", half_then_ctrl_c)
    out = tmp_path / "demo"
    assert main(["demo", "--analytic-only", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err == "specsim demo: interrupted; nothing written\n"
    assert list(out.iterdir()) == []


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OSError])
def test_atomic_write_keeps_the_old_file_when_the_writer_stops(tmp_path, stop):
    path = tmp_path / "table.csv"
    path.write_text("old,whole\n")

    def writer(tmp):
        assert tmp.parent == tmp_path and tmp.suffix == ".csv" and tmp != path
        tmp.write_text("new,ha")
        raise stop
    with pytest.raises(stop):
        atomic.write(path, writer)
    assert path.read_text() == "old,whole\n" and os.listdir(tmp_path) == ["table.csv"]
    atomic.write_text(path, "new,whole\n")
    assert path.read_text() == "new,whole\n" and os.listdir(tmp_path) == ["table.csv"]


def test_a_swallowed_ctrl_c_is_still_seen():
    """SIGINT raised where something swallows the KeyboardInterrupt (as a callback from
    compiled code may) is recorded, and `check` raises it at the next step boundary."""
    from specsim import interrupt

    previous = interrupt.catch()
    try:
        assert not interrupt.seen()
        interrupt.check()                           # nothing arrived: no exception
        try:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):                   # the handler runs between bytecodes
                time.sleep(0.001)
        except KeyboardInterrupt:
            pass                                    # swallowed
        assert interrupt.seen()
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
    finally:
        interrupt.release(previous)
    assert signal.getsignal(signal.SIGINT) is previous
