"""``df.writeStream.format("kip")``: not in this first slice (docs/spark.md, "Not done")."""

from __future__ import annotations

from collections.abc import Mapping

from .options import OptionError


class KipStreamWriter:
    def __init__(self, options: Mapping[str, str], columns: list[str]) -> None:
        raise OptionError("writeStream.format('kip') is not implemented yet; use "
                          "foreachBatch with df.write.format('kip') (docs/spark.md)")
