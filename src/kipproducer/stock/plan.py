"""How one partition's records with asked offsets are written on a stock cluster.

Every record of an aborted transaction and every transaction marker takes one offset, and a
read_committed reader sees neither (docs/stock-clusters.md). So, from the partition's log end:

* a run of consecutive offsets that starts at the log end is written as it is (the idempotent
  lane, no transaction);
* a gap of g >= 2 offsets is an aborted transaction of g - 1 filler records and its abort
  marker;
* a gap of exactly 1 is the commit marker of a transaction that holds the run just before it.

A gap of 1 right at the log end has no run before it to carry its marker: librdkafka adds a
partition to a transaction only with a record, and an empty aborted transaction is not
something a stock client can write. :func:`plan_runs` reports it as a step of its own
(``LONE_MARKER``) that the writer refuses.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

FILLER_HEADER = "kip.filler"
"""The header every filler record carries (its value is empty; the record's key is empty, its
value null)."""


class Step(Enum):
    PLAIN = "plain"          # records written at the log end, no transaction
    COMMITTED = "committed"  # records in a transaction whose commit marker fills a gap of 1
    FILL = "fill"            # ``count`` filler records in a transaction that is aborted
    LONE_MARKER = "lone"     # a gap of 1 at the log end with no run before it: refused
    MARKER = "marker"        # a gap of 1 as an empty aborted transaction (with_empty_markers)


@dataclass(frozen=True)
class Action:
    step: Step
    start: int   # the offset the first record (or filler) must land at
    count: int   # records (PLAIN, COMMITTED: indexes [first, first + count) of the input)
    first: int = -1

    @property
    def end(self) -> int:
        """The log end after this action (markers counted)."""
        marker = 1 if self.step in (Step.COMMITTED, Step.FILL, Step.MARKER) else 0
        return self.start + self.count + marker


def runs_of(offsets: list[int]) -> list[tuple[int, int]]:
    """(index of the first record, length) of each run of consecutive offsets."""
    if not len(offsets):
        return []
    import numpy as np

    starts = np.flatnonzero(np.diff(np.asarray(offsets, dtype=np.int64)) != 1) + 1
    bounds = [0, *starts.tolist(), len(offsets)]
    return [(bounds[i], bounds[i + 1] - bounds[i]) for i in range(len(bounds) - 1)]


def plan_runs(log_end: int, offsets: list[int]) -> list[Action]:
    """The actions that put records at ``offsets`` (strictly increasing, the first at or
    above ``log_end``) in a log that ends at ``log_end``."""
    runs = runs_of(offsets)
    gaps = []
    end = log_end
    for first, length in runs:
        gaps.append(offsets[first] - end)
        end = offsets[first] + length
    actions: list[Action] = []
    for i, (first, length) in enumerate(runs):
        start = offsets[first]
        gap = gaps[i]
        if gap < 0:
            raise ValueError(f"offset {start} is below the log end {start - gap}")
        if gap == 1 and i == 0:
            actions.append(Action(Step.LONE_MARKER, log_end, 0))
        elif gap >= 2:
            actions.append(Action(Step.FILL, start - gap, gap - 1))
        closes_gap_of_one = i + 1 < len(runs) and gaps[i + 1] == 1
        step = Step.COMMITTED if closes_gap_of_one else Step.PLAIN
        actions.append(Action(step, start, length, first))
    return actions


def with_empty_markers(actions: list[Action]) -> list[Action]:
    """The same plan with every gap of exactly one written as an empty aborted transaction
    (a partition added without a record: its abort marker takes the offset) instead of the
    commit marker of the run before it: no record rides in a transaction, so a writer killed
    at any point loses nothing its successor cannot write (the kill-safe plan the preserve
    mirror uses), and a gap of one at the log end is no longer refused."""
    out: list[Action] = []
    for action in actions:
        if action.step == Step.COMMITTED:
            out.append(Action(Step.PLAIN, action.start, action.count, action.first))
            out.append(Action(Step.MARKER, action.start + action.count, 0))
        elif action.step == Step.LONE_MARKER:
            out.append(Action(Step.MARKER, action.start, 0))
        else:
            out.append(action)
    return out
