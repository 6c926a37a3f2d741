"""Small helpers shared by the handlers."""

from __future__ import annotations

from kipproducer.protocol import error_codes as ec

INVALID_CONFIG = ec.error_code("INVALID_CONFIG")
FETCH_SESSION_ID_NOT_FOUND = ec.error_code("FETCH_SESSION_ID_NOT_FOUND")
INVALID_FETCH_SESSION_EPOCH = ec.error_code("INVALID_FETCH_SESSION_EPOCH")

#: Metadata / DescribeCluster "authorized operations were not requested".
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

#: Every partition has one replica, this broker, and its leader epoch never changes.
LEADER_EPOCH = 0


def logs_of(ctx):
    """The broker's LogManager (the broker is started before any request is served)."""
    logs = ctx.broker.logs
    if logs is None:
        raise RuntimeError("broker is not started")
    return logs
