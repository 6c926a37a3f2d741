"""Small helpers shared by the handlers."""

from __future__ import annotations

from kipproducer.protocol import error_codes as ec

INVALID_CONFIG = ec.error_code("INVALID_CONFIG")
FETCH_SESSION_ID_NOT_FOUND = ec.error_code("FETCH_SESSION_ID_NOT_FOUND")
INVALID_FETCH_SESSION_EPOCH = ec.error_code("INVALID_FETCH_SESSION_EPOCH")

#: Every partition has one replica, this broker, and its leader epoch never changes.
LEADER_EPOCH = 0


def partition_log(logs, info, topic: str, index: int, allowed: bool = True):
    """``(log, NONE)`` for a partition a request may use, else ``(None, code)``: the error a
    per-partition answer carries (TOPIC_AUTHORIZATION_FAILED first, so a client without the
    ACL cannot learn which topics exist; then UNKNOWN_TOPIC_OR_PARTITION; then
    KAFKA_STORAGE_ERROR for a log an I/O error or damage took offline). ``info`` is the
    topic's TopicInfo or None."""
    if not allowed:
        return None, ec.TOPIC_AUTHORIZATION_FAILED
    if info is None or not 0 <= index < info.partitions:
        return None, ec.UNKNOWN_TOPIC_OR_PARTITION
    log = logs.get_log(topic, index)
    if log.offline:
        return None, ec.KAFKA_STORAGE_ERROR
    return log, ec.NONE


def logs_of(ctx):
    """The broker's LogManager (the broker is started before any request is served)."""
    logs = ctx.broker.logs
    if logs is None:
        raise RuntimeError("broker is not started")
    return logs
