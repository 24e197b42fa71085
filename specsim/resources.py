"""Files that ship inside the package, under ``specsim/data/`` (see its README.md).

The package reads only these at run time, through `importlib.resources`, so an ordinary
(non-editable) install has them: the hardware datasheet rows, the prompt set a draft is
distilled on, the committed draft weights, the reference forward sweep with its
ceilings, and the papers' printed numbers. What specsim writes (results, measurements,
figures) goes to a folder the caller names, by default under the working directory's
``results/``, never here.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["DATA_DIR", "data_path"]


def _data_dir() -> Path:
    root = resources.files("specsim").joinpath("data")
    if not isinstance(root, Path):      # a zipped install: its files have no filesystem path
        raise RuntimeError(f"specsim's package data at {root} is not on the file system; "
                           f"install specsim unzipped (pip installs wheels unzipped)")
    return root


DATA_DIR = _data_dir()
"""``specsim/data/`` of the imported package."""


def data_path(*parts: str) -> Path:
    """The packaged file ``specsim/data/<parts...>``, e.g. ``data_path("hardware.csv")``."""
    return DATA_DIR.joinpath(*parts)
