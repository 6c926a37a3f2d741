"""LogManager: topics on disk, restart, deletion, configs, periodic tasks, producer ids."""

from __future__ import annotations

import errno
import json
import os
import time
import uuid

import pytest

from kipproducer.broker.storage import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    LogManager,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
)


def test_create_write_restart_read(tmp_path, kit):
    with LogManager(tmp_path) as manager:
        info = manager.create_topic("orders", 3, {"retention.ms": "60000"})
        assert info.partitions == 3 and info.config.retention_ms == 60_000
        for partition in range(3):
            log = manager.get_log("orders", partition)
            log.append(kit.batch(kit.values(partition + 1)), assign_offsets=True)
        assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == [
            "orders-0",
            "orders-1",
            "orders-2",
        ]
    with LogManager(tmp_path) as manager:
        restored = manager.topic("orders")
        assert restored.topic_id == info.topic_id
        assert restored.config.overrides == {"retention.ms": "60000"}
        assert manager.topic_by_id(info.topic_id).name == "orders"
        for partition in range(3):
            log = manager.get_log("orders", partition)
            assert log.log_end_offset == partition + 1
            assert log.config.retention_ms == 60_000
        with pytest.raises(UnknownTopicError) as excinfo:
            manager.get_log("orders", 3)
        assert excinfo.value.error_code == 3


def test_create_topic_validation(tmp_path):
    with LogManager(tmp_path) as manager:
        for bad in ("", ".", "..", "a/b", "x" * 250, "sp ace"):
            with pytest.raises(InvalidTopicError):
                manager.create_topic(bad, 1)
        with pytest.raises(InvalidPartitionsError):
            manager.create_topic("t", 0)
        with pytest.raises(InvalidConfigError):
            manager.create_topic("t", 1, {"segment.bytes": "tiny"})
        assert manager.create_topic("t", 1, validate_only=True).partitions == 1
        assert manager.topics() == {}
        manager.create_topic("t", 1)
        with pytest.raises(TopicExistsError):
            manager.create_topic("t", 1)


def test_delete_topic_removes_files_and_survives_restart(tmp_path, kit):
    with LogManager(tmp_path) as manager:
        manager.create_topic("gone", 2)
        manager.create_topic("kept", 1)
        manager.get_log("gone", 0).append(kit.batch(kit.values(1)), assign_offsets=True)
        log = manager.get_log("gone", 0)
        manager.delete_topic("gone")
        assert log.closed
        assert not (tmp_path / "gone-0").exists() and not (tmp_path / "gone-1").exists()
        with pytest.raises(UnknownTopicError):
            manager.topic("gone")
        # Re-created with the same name: a new topic with a new id and an empty log.
        again = manager.create_topic("gone", 1)
        assert manager.get_log("gone", 0).log_end_offset == 0
    with LogManager(tmp_path) as manager:
        assert set(manager.topics()) == {"gone", "kept"}
        assert manager.topic("gone").topic_id == again.topic_id


def test_leftovers_of_deleted_topics_are_removed_at_start(tmp_path, kit):
    with LogManager(tmp_path) as manager:
        info = manager.create_topic("t", 1)
        manager.get_log("t", 0).append(kit.batch(kit.values(1)), assign_offsets=True)
    # A crash after topics.json dropped the topic but before its directory was removed...
    document = json.loads((tmp_path / "topics.json").read_text())
    stale = dict(document["topics"]["t"])
    document["topics"] = {}
    (tmp_path / "topics.json").write_text(json.dumps(document))
    (tmp_path / "x-0.abc-delete").mkdir()
    with LogManager(tmp_path) as manager:
        assert manager.topics() == {}
    assert not (tmp_path / "t-0").exists()
    assert not (tmp_path / "x-0.abc-delete").exists()
    # ...and a directory of an older topic with the same name as a new one.
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
        manager.get_log("t", 0).append(kit.batch(kit.values(2)), assign_offsets=True)
    document = json.loads((tmp_path / "topics.json").read_text())
    assert document["topics"]["t"]["topic_id"] != stale["topic_id"] == str(info.topic_id)
    document["topics"]["t"]["topic_id"] = str(uuid.uuid4())
    (tmp_path / "topics.json").write_text(json.dumps(document))
    with LogManager(tmp_path) as manager:
        assert manager.get_log("t", 0).log_end_offset == 0


def test_missing_topics_file_with_partitions_is_refused(tmp_path):
    with LogManager(tmp_path) as manager:
        manager.create_topic("t", 1)
    (tmp_path / "topics.json").unlink()
    with pytest.raises(StorageError, match="refusing"):
        LogManager(tmp_path)
    assert (tmp_path / "t-0").exists()


def test_data_dir_is_locked(tmp_path):
    with LogManager(tmp_path):
        with pytest.raises(StorageError, match="in use"):
            LogManager(tmp_path)
    LogManager(tmp_path).close()


def test_configs_and_partitions_can_change(tmp_path):
    with LogManager(tmp_path, broker_defaults={"retention.ms": "5000"}) as manager:
        manager.create_topic("t", 1)
        assert manager.get_log("t", 0).config.retention_ms == 5000
        manager.incremental_alter_topic_config("t", {"retention.ms": "7000"})
        assert manager.get_log("t", 0).config.retention_ms == 7000
        manager.alter_topic_config("t", {"segment.ms": "60000"})
        assert manager.get_log("t", 0).config.retention_ms == 5000
        grown = manager.create_partitions("t", 3)
        assert grown.partitions == 3 and manager.get_log("t", 2).config.segment_ms == 60_000
        with pytest.raises(InvalidPartitionsError):
            manager.create_partitions("t", 2)
    with LogManager(tmp_path, broker_defaults={"retention.ms": "5000"}) as manager:
        assert manager.topic("t").partitions == 3
        assert manager.topic("t").config.overrides == {"segment.ms": "60000"}


def test_periodic_tasks_apply_retention_compaction_and_flush(tmp_path, kit):
    with LogManager(tmp_path) as manager:
        manager.create_topic("old", 1, {"retention.ms": "1000"})
        manager.create_topic("compacted", 1, {"cleanup.policy": "compact"})
        manager.create_topic("flushed", 1, {"flush.ms": "0"})
        old = manager.get_log("old", 0)
        old.append(kit.batch(kit.values(2), timestamp=1000), assign_offsets=True)
        compacted = manager.get_log("compacted", 0)
        for value in (b"1", b"2", b"3"):
            compacted.append(kit.batch([(b"k", value)]), assign_offsets=True)
        compacted.roll()
        now_ms = int(time.time() * 1000)
        fresh = kit.batch(kit.values(1), timestamp=now_ms)
        manager.get_log("flushed", 0).append(fresh, assign_offsets=True)
        report = manager.run_periodic_tasks(now_ms=now_ms + 1000)
        assert report.errors == []
        assert report.segments_deleted == 1 and old.log_start_offset == 2
        assert report.partitions_compacted == 1 and report.records_compacted == 2
        assert [r.value for r in kit.read_all(compacted, 0)] == [b"3"]
        assert report.partitions_flushed >= 1
        assert not manager.get_log("flushed", 0).has_unflushed_data()


def test_producer_ids_come_from_the_data_dir(tmp_path):
    with LogManager(tmp_path, producer_id_block_size=10) as manager:
        first = [manager.allocate_producer_id() for _ in range(3)]
    with LogManager(tmp_path, producer_id_block_size=10) as manager:
        second = manager.allocate_producer_id()
    assert first == [0, 1, 2] and second == 10


def test_a_topic_change_that_topics_json_cannot_hold_is_not_made(tmp_path, kit, monkeypatch):
    """rename (the last step of rewriting topics.json) failing with EIO: create, grow,
    reconfigure and delete each raise StorageError and change nothing, in memory or after
    a restart; a topic created only in memory would vanish at the restart with its data."""
    real_replace = os.replace

    def replace(src, dst, **kwargs):
        if str(dst).endswith("topics.json"):
            raise OSError(errno.EIO, "Input/output error (injected)")
        return real_replace(src, dst, **kwargs)

    with LogManager(tmp_path) as manager:
        manager.create_topic("kept", 1)
        manager.get_log("kept", 0).append(kit.batch(kit.values(3)), assign_offsets=True)
        monkeypatch.setattr(os, "replace", replace)
        for change in (lambda: manager.create_topic("new", 2),
                       lambda: manager.create_partitions("kept", 3),
                       lambda: manager.alter_topic_config("kept", {"retention.ms": "1000"}),
                       lambda: manager.delete_topic("kept")):
            with pytest.raises(StorageError, match="topics.json"):
                change()
        assert {name: info.partitions for name, info in manager.topics().items()} == {"kept": 1}
        assert manager.topic("kept").config.overrides == {}
        assert not (tmp_path / "new-0").exists() and not (tmp_path / "kept-1").exists()
        monkeypatch.undo()
        manager.get_log("kept", 0).append(kit.batch(kit.values(2)), assign_offsets=True)
    with LogManager(tmp_path) as manager:
        assert {name: info.partitions for name, info in manager.topics().items()} == {"kept": 1}
        assert manager.get_log("kept", 0).log_end_offset == 5
