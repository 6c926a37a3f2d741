"""Prints client_config.py's property table as the Markdown table of the docs::

    python -m kipproducer.config_docs                # docs/producer.md, "Configuration the
                                                     # engine reads" (the engine's and kip.*)
    python -m kipproducer.config_docs --scope group  # the producer groups' properties

tests/test_client_config.py fails when docs/producer.md's generated table is not this output.
(A module of its own: ``python -m`` on client_config, which the package imports, would run a
second copy of it.)
"""

from __future__ import annotations

import argparse

from .client_config import ENGINE, GROUP, GROUP_HEADER, KIP, MEMBER, of_scope, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kipproducer.config_docs",
        description="Print the table of the client properties kipproducer reads (Markdown).")
    parser.add_argument("--scope", choices=("engine", "group"), default="engine",
                        help="engine: the engine's and kip.* properties (docs/producer.md); "
                             "group: producer groups' (docs/producer-groups.md)")
    args = parser.parse_args(argv)
    if args.scope == "group":
        print(table(of_scope(MEMBER, GROUP), GROUP_HEADER), end="")
    else:
        print(table(of_scope(ENGINE, KIP)), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
