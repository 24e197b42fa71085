"""Write docs/studies/published-speedups.md: the iteration cost model against the published
GPU/TPU speedups, leave-one-source-out (`specsim.published_page.validation_page`), and the same
model on this CPU's measured ceilings against the default demo's reference run
(`specsim.experiment.ceiling_prediction.ceiling_section`, from ``data/demo-cpu``) and
the repeated demos in ``data/demo-cpu-repeats``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "studies" / "published-speedups.md"
DEMO = ROOT / "data" / "demo-cpu"
REPEATS = ROOT / "data" / "demo-cpu-repeats"


def page_text(demo: Path = DEMO, repeats: Path | None = REPEATS) -> str:
    """The study page: the published set's validation and the demo folder's section,
    with the repeated demos' table."""
    from specsim.experiment.ceiling_prediction import ceiling_section
    from specsim.published_page import validation_page

    return validation_page(extra_sections=[ceiling_section(demo, repeats)])


def main() -> None:
    text = page_text()
    tmp = PAGE.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(PAGE)
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
