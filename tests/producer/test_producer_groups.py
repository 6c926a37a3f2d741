"""Producer groups (KIP-509) and heartbeat positions (KIP-910) against ``kip broker``.

Every KIP-509 case runs in both modes: at-least-once (``commit_positions`` after the data) and
transactional (``commit_transaction(positions=...)``). Members live in this one thread: their
callbacks run only from inside their own calls (``alive()`` here), so the tests drive each
member in turn, as a real member's loop would.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from producer_support import create_topic, read_confluent, unique

from kipproducer import Producer
from kipproducer.cli import main as cli_main
from kipproducer.engine.config import ConfigError
from kipproducer.producer_group import POSITIONS_TOPIC_PREFIX

SESSION_MS = 6000   # the broker's group.min.session.timeout.ms


@pytest.fixture(params=["at-least-once", "transactional"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def out_topic(kip) -> str:
    return create_topic(kip.bootstrap, unique("pg-out"), 1)


class Member:
    """A producer-group member and what its callbacks saw."""

    def __init__(self, broker, mode: str, group: str, count: int = 2, *,
                 txn_id: str | None = None, **config: Any) -> None:
        conf = {"bootstrap.servers": broker.bootstrap, "group.id": group,
                "source.partition.count": count, "session.timeout.ms": SESSION_MS,
                "linger.ms": 1, **config}
        self.mode = mode
        if mode == "transactional":
            conf["transactional.id"] = txn_id or unique("pg-txn")
        self.p = Producer(conf)
        self.events: list[tuple[str, Any]] = []

    def subscribe(self) -> dict:
        return self.p.subscribe(
            on_assign=lambda p, d: self.events.append(("assign", d)),
            on_revoke=lambda p, parts: self.events.append(("revoke", parts)),
            on_lost=lambda p, parts: self.events.append(("lost", parts)))

    def commit(self, topic: str, positions: dict) -> None:
        """Produce one record per position, then commit the positions (the mode's way)."""
        if self.mode == "transactional":
            self.p.begin_transaction()
            for part, pos in positions.items():
                self.p.produce(topic, f"{part}:{pos}".encode())
            self.p.commit_transaction(positions=positions)
        else:
            for part, pos in positions.items():
                self.p.produce(topic, f"{part}:{pos}".encode())
            self.p.commit_positions(positions)

    def owned(self) -> dict:
        return self.p.alive()

    def close(self) -> None:
        self.p.close()


def settle(members: list[Member], done, timeout: float = 20.0) -> None:
    """Drive every member (alive()) until ``done()``; each call serves its callbacks."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.owned()
        if done():
            return
        time.sleep(0.02)
    raise AssertionError("group did not settle: " + ", ".join(
        f"{m.p.assignment_positions()} {m.events}" for m in members))


def committed_positions(broker, group: str, count: int) -> dict:
    """The group's committed offsets of its positions topic, read with a plain consumer."""
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        parts = c.committed([TopicPartition(POSITIONS_TOPIC_PREFIX + group, p)
                             for p in range(count)], timeout=10)
        return {tp.partition: (tp.offset, tp.metadata) for tp in parts}
    finally:
        c.close()


def position_records(broker, group: str, count: int) -> dict:
    """{(partition, offset): (key, value)} of the positions topic (read_committed)."""
    return {(r.partition, r.offset): (r.key, r.value)
            for r in read_confluent(broker.bootstrap, POSITIONS_TOPIC_PREFIX + group, count,
                                    config={"isolation.level": "read_committed"})}


# ---- KIP-509's cases --------------------------------------------------------------------------


def test_first_member_gets_all_then_restart_resumes(kip, mode, out_topic, capsys):
    group = unique("pg-first")
    txn_id = unique("pg-txn")
    a = Member(kip, mode, group, 3, txn_id=txn_id, **{"client.id": "loader-a"})
    assert a.subscribe() == {0: None, 1: None, 2: None}
    assert a.events == [("assign", {0: None, 1: None, 2: None})]
    a.commit(out_topic, {0: "2026-11-24T12:34:00", 2: "row-17"})
    assert a.owned() == {0: "2026-11-24T12:34:00", 1: None, 2: "row-17"}
    # kip groups describe: the owners and positions, from the group's own data.
    capsys.readouterr()
    assert cli_main(["groups", "--bootstrap-server", kip.bootstrap, "describe", group]) == 0
    shown = capsys.readouterr().out
    assert f"producer group {group}: state Stable" in shown
    rows = {line.split()[0]: line.split()[1:] for line in shown.splitlines()
            if line[:1].isdigit()}
    assert rows["0"][:2] == ["2026-11-24T12:34:00", "loader-a/127.0.0.1"]
    assert rows["1"][0] == "(none)" and rows["2"][0] == "row-17"
    a.close()
    # With no member left, a partition without a position is still listed, as "(none)".
    assert cli_main(["groups", "--bootstrap-server", kip.bootstrap, "describe", group]) == 0
    rows = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines()
            if line[:1].isdigit()}
    assert rows == {"0": ["2026-11-24T12:34:00", "-"], "1": ["(none)", "-"],
                    "2": ["row-17", "-"]}, rows
    # The storage format: the committed offset points just past the position's record, the
    # metadata holds a copy; never committed: no offset.
    stored = committed_positions(kip, group, 3)
    assert stored[0][1] == "2026-11-24T12:34:00" and stored[2][1] == "row-17"
    assert stored[1][0] < 0
    records = position_records(kip, group, 3)
    assert records[(0, stored[0][0] - 1)] == (b"0", b"2026-11-24T12:34:00")
    assert records[(2, stored[2][0] - 1)] == (b"2", b"row-17")
    a2 = Member(kip, mode, group, 3, txn_id=txn_id)  # the restarted member
    assert a2.subscribe() == {0: "2026-11-24T12:34:00", 1: None, 2: "row-17"}
    a2.close()
    values = {r.value for r in read_confluent(kip.bootstrap, out_topic, 1)}
    assert {b"0:2026-11-24T12:34:00", b"2:row-17"} <= values


def test_second_member_splits_and_third_stands_by(kip, mode, out_topic):
    group = unique("pg-split")
    a = Member(kip, mode, group)
    assert a.subscribe() == {0: None, 1: None}
    a.commit(out_topic, {0: "a0", 1: "a1"})
    b = Member(kip, mode, group)
    assert b.subscribe() == {}  # cooperative: A gives one up first
    settle([a, b], lambda: len(a.p.assignment_positions()) == 1
           and len(b.p.assignment_positions()) == 1)
    (given,) = [p for p in (0, 1) if p not in a.p.assignment_positions()]
    assert ("revoke", [given]) in a.events
    assert b.events == [("assign", {given: f"a{given}"})]  # A's committed position
    # A third member with two busy members and N=2 stands by.
    c = Member(kip, mode, group)
    assert c.subscribe() == {}
    settle([a, b, c], lambda: True, timeout=2)
    assert sorted(len(m.owned()) for m in (a, b, c)) == [0, 1, 1]
    assert c.events == []
    # B leaves: its partition goes to the standby, with B's position.
    b.commit(out_topic, {given: "b-last"})
    b.close()
    settle([a, c], lambda: len(c.p.assignment_positions()) == 1)
    assert c.events == [("assign", {given: "b-last"})]
    a.close()
    c.close()


def test_member_that_stops_calling_loses_its_partitions(kip, mode, out_topic):
    group = unique("pg-dead")
    config = {"max.alive.interval.ms": SESSION_MS}
    a = Member(kip, mode, group, **config)
    a.subscribe()
    b = Member(kip, mode, group, **config)
    b.subscribe()
    settle([a, b], lambda: len(a.p.assignment_positions()) == 1
           and len(b.p.assignment_positions()) == 1)
    (mine,) = a.p.assignment_positions()
    stale = a.p._group.group_metadata()  # what a zombie would commit with
    a.commit(out_topic, {mine: "before-stall"})
    # A stops calling anything: after max.alive.interval.ms B gets everything.
    deadline = time.monotonic() + 30
    while len(b.owned()) < 2:
        assert time.monotonic() < deadline, b.events
        time.sleep(0.05)
    assert b.owned() == {0: None, 1: None, mine: "before-stall"}
    # A's next call tells it what happened.
    assert a.owned() == {} or ("lost", [mine]) in a.events
    assert ("lost", [mine]) in a.events
    if mode == "transactional":
        # KIP-447: a zombie's positions in a transaction (its old generation) are refused
        # by the group coordinator, and only abort_transaction() helps.
        a.p.begin_transaction()
        with pytest.raises(KafkaException) as info:
            a.p.send_offsets_to_transaction(
                [TopicPartition(POSITIONS_TOPIC_PREFIX + group, mine, 1, metadata="zombie")],
                stale)
        err = info.value.args[0]
        assert err.code() in (KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID)
        assert err.txn_requires_abort()
        a.p.abort_transaction()
    assert b.owned()[mine] == "before-stall"
    a.close()
    b.close()


# ---- commit_positions and its refusals --------------------------------------------------------


def test_commits_refused_for_partitions_not_owned(kip, mode, out_topic):
    group = unique("pg-refuse")
    a = Member(kip, mode, group, 3)
    with pytest.raises(KafkaException, match="subscribe"):
        a.p.alive()  # not a member yet
    a.subscribe()
    b = Member(kip, mode, group, 3)
    b.subscribe()
    settle([a, b], lambda: len(a.p.assignment_positions()) + len(b.p.assignment_positions())
           == 3 and len(b.p.assignment_positions()) > 0)
    (theirs, *_) = b.p.assignment_positions()
    (mine, *_) = a.p.assignment_positions()
    for bad, why in (({theirs: "x", mine: "y"}, "not owned by this member"),
                     ({7: "x"}, "does not exist"), ({mine: 5}, "must be a str"),
                     ({mine: "x" * 5000}, "offset.metadata.max.bytes"),
                     (["x"], "must be a dict")):
        if mode == "transactional":
            a.p.begin_transaction()
            with pytest.raises(KafkaException, match=why):
                a.p.commit_transaction(positions=bad)
            a.p.abort_transaction()
        else:
            with pytest.raises(KafkaException, match=why):
                a.p.commit_positions(bad)
    if mode == "transactional":
        with pytest.raises(KafkaException, match="commit_transaction"):
            a.p.commit_positions({mine: "x"})
    stored = committed_positions(kip, group, 3)
    assert all(offset < 0 for offset, _ in stored.values()), "nothing was committed"
    a.close()
    b.close()


def test_producer_without_group_is_unchanged(kip):
    p = Producer({"bootstrap.servers": kip.bootstrap})
    assert p._group is None
    with pytest.raises(KafkaException, match="group.id"):
        p.subscribe()
    with pytest.raises(KafkaException, match="producer group"):
        p.commit_transaction(positions={0: "x"})
    p.close()
    with pytest.raises(ConfigError, match="group.id"):
        Producer({"bootstrap.servers": kip.bootstrap, "source.partition.count": 2})
    with pytest.raises(ConfigError, match="source.partition.count"):
        Producer({"bootstrap.servers": kip.bootstrap, "group.id": "g",
                  "source.partition.count": 0})
    with pytest.raises(ConfigError, match="max.alive.interval.ms"):
        Producer({"bootstrap.servers": kip.bootstrap, "group.id": "g",
                  "source.partition.count": 2, "max.alive.interval.ms": 1000})


def test_positions_topic_partition_count(kip):
    group = unique("pg-count")
    topic = POSITIONS_TOPIC_PREFIX + group
    admin = AdminClient({"bootstrap.servers": kip.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result()
    smaller = Producer({"bootstrap.servers": kip.bootstrap, "group.id": group,
                        "source.partition.count": 2, "session.timeout.ms": SESSION_MS})
    with pytest.raises(KafkaException, match="has 3 partitions but source.partition.count=2"):
        smaller.subscribe()
    smaller.close()
    larger = Producer({"bootstrap.servers": kip.bootstrap, "group.id": group,
                       "source.partition.count": 4, "session.timeout.ms": SESSION_MS})
    assert larger.subscribe() == {0: None, 1: None, 2: None, 3: None}  # grown
    larger.close()
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 4


# ---- KIP-910 ----------------------------------------------------------------------------------


def test_idle_positions_advance_through_update_offsets_cb(kip, mode, out_topic):
    group = unique("pg-idle")
    txn_id = unique("pg-txn")
    seen: list[dict] = []
    answers = [{0: "idle-1"}, {1: None}, None, {}]

    def hook(positions):
        seen.append(dict(positions))
        positions.clear()  # a copy: the member's own are untouched
        return answers[len(seen) - 1] if len(seen) <= len(answers) else None

    a = Member(kip, mode, group, txn_id=txn_id, update_offsets_cb=hook,
               **{"positions.commit.interval.ms": 200})
    a.subscribe()
    a.commit(out_topic, {0: "busy-0", 1: "busy-1"})  # the hook is asked at this commit too
    assert seen == [{0: "busy-0", 1: "busy-1"}]
    assert a.owned() == {0: "idle-1", 1: "busy-1"}
    records = len(read_confluent(kip.bootstrap, out_topic, 1))
    deadline = time.monotonic() + 10
    while len(seen) < 4:  # the periodic commits, from alive() only
        assert time.monotonic() < deadline
        a.owned()
        time.sleep(0.05)
    assert seen[1] == {0: "idle-1", 1: "busy-1"}
    assert a.owned() == {0: "idle-1", 1: None}  # deleted
    assert len(read_confluent(kip.bootstrap, out_topic, 1)) == records, "no data produced"
    stored = committed_positions(kip, group, 2)
    assert stored[0][1] == "idle-1" and stored[1] == (0, "")  # 0: deleted
    records = position_records(kip, group, 2)
    assert records[(0, stored[0][0] - 1)] == (b"0", b"idle-1")
    last_of_1 = max(offset for part, offset in records if part == 1)
    assert records[(1, last_of_1)] == (b"1", None)  # the deletion's tombstone
    a.close()
    again = Member(kip, mode, group, txn_id=txn_id)
    assert again.subscribe() == {0: "idle-1", 1: None}
    again.close()


def test_bad_update_offsets_cb_results(kip, mode, out_topic):
    group = unique("pg-badhook")
    result: list[Any] = [None]

    def hook(positions):
        if isinstance(result[0], Exception):
            raise result[0]
        return result[0]

    a = Member(kip, mode, group, update_offsets_cb=hook)
    a.subscribe()
    for bad, error, why in (([("0", "x")], KafkaException, "must return a dict"),
                            ({5: "x"}, KafkaException, "update_offsets_cb: source partition 5"),
                            ({0: 17}, KafkaException, "must be a str"),
                            (ValueError("hook broke"), ValueError, "hook broke")):
        result[0] = bad
        if mode == "transactional":
            a.p.begin_transaction()
            with pytest.raises(error, match=why):
                a.p.commit_transaction(positions={0: "mine"})
            a.p.abort_transaction()
        else:
            with pytest.raises(error, match=why):
                a.p.commit_positions({0: "mine"})
    result[0] = {1: "fine"}
    a.commit(out_topic, {0: "mine"})
    assert a.owned() == {0: "mine", 1: "fine"}
    a.close()
    with pytest.raises(ConfigError, match="callable"):
        Member(kip, mode, group, update_offsets_cb="not a function")


# ---- Tansu: a broker that is not ours ---------------------------------------------------------


def test_tansu_at_least_once(tansu):
    """The at-least-once mode on Tansu, a broker that is not ours: membership, splitting,
    positions kept across a restart and deleted. Tansu drops offset commit metadata
    (../shared/reference/tansu.md), so the positions are read from their records; growing
    the positions topic needs CreatePartitions, which Tansu lacks: a clear error."""
    topic = create_topic(tansu.bootstrap, unique("pg-out"), 1)
    group = unique("pg-tansu")
    a = Member(tansu, "at-least-once", group, 2)
    assert a.subscribe() == {0: None, 1: None}
    a.commit(topic, {0: "p0-1", 1: "p1-1"})
    a.commit(topic, {0: "p0-2"})
    stored = committed_positions(tansu, group, 2)
    assert stored[0][0] > 0 and not stored[0][1], "Tansu keeps no metadata (the reason)"
    a.close()
    a2 = Member(tansu, "at-least-once", group, 2)
    assert a2.subscribe() == {0: "p0-2", 1: "p1-1"}  # from the records
    a2.commit(topic, {1: None})
    b = Member(tansu, "at-least-once", group, 2)
    assert b.subscribe() == {}
    settle([a2, b], lambda: len(a2.p.assignment_positions()) == 1
           and len(b.p.assignment_positions()) == 1, timeout=30)
    assert {**a2.p.assignment_positions(), **b.p.assignment_positions()} == {0: "p0-2", 1: None}
    b.close()
    a2.close()
    values = [r.value for r in read_confluent(tansu.bootstrap, topic, 1)]
    assert values == [b"0:p0-1", b"1:p1-1", b"0:p0-2", b"1:None"]
    with pytest.raises(KafkaException, match="could not grow positions topic"):
        Member(tansu, "at-least-once", group, 3).subscribe()
