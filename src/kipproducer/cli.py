"""The `kip` command line (also `python -m kipproducer`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    return demo.run(records=args.records)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kip", description="kipproducer command line")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="show the record core at work: offsets kept, batches "
                                       "checked by independent readers, speed")
    demo.add_argument("--records", type=int, default=200_000,
                      help="records in the speed part (default 200000)")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
