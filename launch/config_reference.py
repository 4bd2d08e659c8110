"""Write the configuration reference, ``docs/config.md``, from the field docstrings.

    python -m launch.config_reference            # (make docs) rewrite docs/config.md
    python -m launch.config_reference --check    # exit 1 if docs/config.md is not current

The text is ``mlsys.config_reference.render()``; the file is replaced atomically
(``mlsys.atomic.atomic_path``, UTF-8), and only when it changes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "docs" / "config.md"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write (default: "
                   "docs/config.md of this checkout)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if the file differs from the rendered text")
    args = p.parse_args(argv)
    from mlsys.atomic import atomic_path
    from mlsys.config_reference import render

    text = render()
    current = args.out.read_text(encoding="utf-8") if args.out.is_file() else None
    if args.check:
        if current != text:
            print(f"{args.out} is not current: run `make docs`", file=sys.stderr)
            return 1
        print(f"{args.out} is current")
        return 0
    if current == text:
        print(f"{args.out} is current")
    else:
        with atomic_path(args.out) as tmp:
            tmp.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
