"""Write docs/studies/published-speedups.md: the iteration cost model against the published
GPU/TPU speedups, leave-one-source-out (`specsim.published.validation_page`)."""

from __future__ import annotations

from pathlib import Path

from specsim.published import validation_page

PAGE = Path(__file__).resolve().parents[1] / "docs" / "studies" / "published-speedups.md"


def main() -> None:
    text = validation_page()
    tmp = PAGE.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(PAGE)
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
