"""Write the generated pages (``--check``: only say which are stale, exit 1 if any)."""

from __future__ import annotations

import sys
from pathlib import Path

from acidclean.docsgen.pages import generated

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    """Write (or check) every generated page under the checkout; returns the exit code."""
    stale = []
    for path, text in generated(ROOT).items():
        target = ROOT / path
        if target.exists() and target.read_text(encoding="utf-8") == text:
            continue
        stale.append(str(path))
        if "--check" not in argv:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    if stale:
        verb = "stale (run `python -m acidclean.docsgen`)" if "--check" in argv else "written"
        print(f"{verb}: {', '.join(stale)}")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
