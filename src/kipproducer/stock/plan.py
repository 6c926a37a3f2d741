"""How one partition's records with asked offsets are written on a stock cluster.

Every record of an aborted transaction and every transaction marker takes one offset, and a
read_committed reader sees neither (docs/stock-clusters.md). So, from the partition's log end:

* a run of consecutive offsets that starts at the log end is written as it is (an idempotent
  lane, no transaction);
* a gap of g >= 2 offsets is an aborted transaction of g - 1 filler records and its abort
  marker;
* a gap of exactly 1 is an empty aborted transaction: the partition is added to a transaction
  without a record, and its abort marker takes the offset.

No caller record ever rides in a transaction, so a writer killed at any point leaves records
that landed or did not, never records a fence aborts after their offsets were taken.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np

FILLER_HEADER = "kip.filler"
"""The header every filler record carries (its value is empty; the record's key is empty, its
value null)."""


class Step(Enum):
    PLAIN = "plain"    # records written at the log end, no transaction
    FILL = "fill"      # ``count`` filler records in a transaction that is aborted
    MARKER = "marker"  # a gap of 1: an empty aborted transaction, its marker takes ``start``


@dataclass(frozen=True, slots=True)
class Action:
    step: Step
    start: int   # the offset the first record (or filler, or the marker) must land at
    count: int   # records (PLAIN: indexes [first, first + count) of the input) or fillers
    first: int = -1

    @property
    def end(self) -> int:
        """The log end after this action (markers counted)."""
        return self.start + self.count + (0 if self.step == Step.PLAIN else 1)


def runs_of(offsets) -> list[tuple[int, int]]:
    """(index of the first record, length) of each run of consecutive offsets."""
    if not len(offsets):
        return []
    starts = np.flatnonzero(np.diff(np.asarray(offsets, dtype=np.int64)) != 1) + 1
    bounds = [0, *starts.tolist(), len(offsets)]
    return [(bounds[i], bounds[i + 1] - bounds[i]) for i in range(len(bounds) - 1)]


def plan_runs(log_end: int, offsets) -> list[Action]:
    """The actions that put records at ``offsets`` (strictly increasing, the first at or
    above ``log_end``) in a log that ends at ``log_end``: per run of consecutive offsets, the
    gap before it (if any) then the run."""
    actions: list[Action] = []
    end = log_end
    for first, length in runs_of(offsets):
        start = int(offsets[first])
        gap = start - end
        if gap < 0:
            raise ValueError(f"offset {start} is below the log end {end}")
        if gap == 1:
            actions.append(Action(Step.MARKER, end, 0))
        elif gap >= 2:
            actions.append(Action(Step.FILL, end, gap - 1))
        actions.append(Action(Step.PLAIN, start, length, first))
        end = start + length
    return actions


def gap_steps(log_end: int, next_offset: int) -> list[Action]:
    """What fills the log from ``log_end`` up to ``next_offset`` (nothing, a marker, or
    fillers and a marker)."""
    gap = next_offset - log_end
    if gap <= 0:
        return []
    return [Action(Step.MARKER, log_end, 0) if gap == 1 else Action(Step.FILL, log_end, gap - 1)]
