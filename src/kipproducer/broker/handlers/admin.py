"""Admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs and DeleteRecords.

This is a single-node broker: replication factors other than 1 (or -1, "the default") and
replica assignments naming another broker are refused with INVALID_REPLICATION_FACTOR /
INVALID_REQUEST and a message that says why.
"""

from __future__ import annotations

import logging

from kipproducer.protocol import build_response
from kipproducer.protocol import error_codes as ec

from ...protocol.api_keys import (
    ALTER_CONFIGS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_RECORDS,
    DELETE_TOPICS,
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
)
from ..api import RequestContext, handles
from ..broker_config_defs import (
    BrokerEntry,
    describe_broker,
    describe_default,
    known_names,
    list_default,
)
from ..dynamic_config import DynamicConfigError, is_dynamic, validate
from ..security.checks import (
    may_alter_configs,
    may_alter_topic,
    may_create_topic,
    may_delete_topic,
    may_describe_configs,
)
from ..storage.config_def import altered_list
from ..storage.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidTopicError,
    OffsetOutOfRangeError,
    ReservedTopicError,
    StorageError,
    TopicExistsError,
    UnknownTopicError,
)
from ..storage.log_config import CONFIG_BY_NAME, TYPE_LIST
from .common import INVALID_CONFIG, logs_of, partition_log

log = logging.getLogger("kipproducer.broker")


RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

#: Kafka's controller refuses a CreateTopics / CreatePartitions request that would add more
#: partitions than this (ReplicationControlManager.MAX_PARTITIONS_PER_BATCH) with
#: POLICY_VIOLATION, before doing anything: one request must not be able to make the broker open
#: billions of partitions (and run out of file descriptors) on the request path.
MAX_PARTITIONS_PER_REQUEST = 10_000
POLICY_VIOLATION = ec.error_code("POLICY_VIOLATION")
TOO_MANY_PARTITIONS = "Excessively large number of partitions per request."


def _error_of(exc: Exception) -> int:
    if isinstance(exc, TopicExistsError):
        return ec.TOPIC_ALREADY_EXISTS
    if isinstance(exc, InvalidTopicError):
        return ec.INVALID_TOPIC_EXCEPTION
    if isinstance(exc, InvalidPartitionsError):
        return ec.INVALID_PARTITIONS
    if isinstance(exc, InvalidConfigError):
        return INVALID_CONFIG
    if isinstance(exc, ReservedTopicError):
        return ec.INVALID_REQUEST
    if isinstance(exc, UnknownTopicError):
        return ec.UNKNOWN_TOPIC_OR_PARTITION
    if isinstance(exc, (StorageError, OSError)):
        # The disk failed us (EMFILE, ENOSPC, ...): an error for this topic, not a crashed
        # connection that the client would retry into the same failure.
        log.warning("admin request failed in storage: %s", exc)
        return ec.KAFKA_STORAGE_ERROR
    raise exc


@handles(CREATE_TOPICS, 2, 7)
async def create_topics(ctx: RequestContext, body):
    logs = logs_of(ctx)
    v = ctx.api_version
    node = ctx.broker.node_id
    requested = sum(
        len(t.assignments)
        if t.assignments
        else ctx.broker.config.num_partitions
        if t.num_partitions == -1
        else max(t.num_partitions, 0)
        for t in body.topics
    )
    too_many = requested > MAX_PARTITIONS_PER_REQUEST
    results = []
    for topic in body.topics:
        answer = {"name": topic.name, "error_code": ec.NONE, "error_message": None}
        try:
            if not may_create_topic(ctx, topic.name):
                raise _Refused(ec.TOPIC_AUTHORIZATION_FAILED,
                               f"{ctx.principal} lacks Create on the cluster and on the topic")
            if too_many:
                raise _Refused(POLICY_VIOLATION, TOO_MANY_PARTITIONS)
            partitions = topic.num_partitions
            if topic.assignments:
                if partitions != -1:
                    raise _Refused(
                        ec.INVALID_REQUEST, "give either num_partitions or assignments, not both"
                    )
                if any(tuple(a.broker_ids) != (node,) for a in topic.assignments):
                    raise _Refused(
                        ec.INVALID_REPLICATION_FACTOR,
                        f"this single-node broker can only place replicas on broker {node}",
                    )
                partitions = len(topic.assignments)
            if partitions == -1:
                partitions = ctx.broker.config.num_partitions
            if topic.replication_factor not in (-1, 1):
                raise _Refused(
                    ec.INVALID_REPLICATION_FACTOR,
                    # Kafka's words, so that its tools print the same line on either broker
                    f"Unable to replicate the partition {topic.replication_factor} time(s): "
                    f"The target replication factor of {topic.replication_factor} cannot be "
                    "reached because only 1 broker(s) are registered or some brokers have all "
                    "their log directories cordoned.",
                )
            configs = {c.name: c.value for c in topic.configs}
            info = logs.create_topic(
                topic.name, partitions, configs, validate_only=body.validate_only
            )
            if v >= 5:
                answer.update(
                    num_partitions=info.partitions,
                    replication_factor=1,
                    configs=[
                        {
                            "name": e.name,
                            "value": e.value,
                            "read_only": e.read_only,
                            "config_source": e.source,
                            "is_sensitive": e.sensitive,
                        }
                        for e in info.config.describe()
                    ],
                )
            if v >= 7:
                answer["topic_id"] = info.topic_id
        except _Refused as refused:
            answer.update(error_code=refused.code, error_message=str(refused))
        except Exception as exc:  # storage errors mapped to their Kafka codes
            answer.update(error_code=_error_of(exc), error_message=str(exc))
        if answer["error_code"] != ec.NONE and v >= 5:
            answer.update(num_partitions=-1, replication_factor=-1)
        results.append(answer)
    return build_response(CREATE_TOPICS, v, topics=results)


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@handles(DELETE_TOPICS, 1, 6)
async def delete_topics(ctx: RequestContext, body):
    logs = logs_of(ctx)
    v = ctx.api_version
    wanted = (
        [(t.name, t.topic_id) for t in body.topics]
        if v >= 6
        else [(name, None) for name in body.topic_names]
    )
    results = []
    for name, topic_id in wanted:
        answer = {"name": name, "error_code": ec.NONE}
        try:
            if name is None and topic_id is not None:
                name = logs.topic_by_id(topic_id).name
                answer["name"] = name
            if name is not None and not may_delete_topic(ctx, name):
                answer["error_code"] = ec.TOPIC_AUTHORIZATION_FAILED
                if v >= 5:
                    answer["error_message"] = f"{ctx.principal} lacks Delete on the topic"
                results.append(answer)
                continue
            info = logs.delete_topic(name)
            if v >= 6:
                answer["topic_id"] = info.topic_id
        except UnknownTopicError as exc:
            answer["error_code"] = (
                ec.UNKNOWN_TOPIC_ID if name is None else ec.UNKNOWN_TOPIC_OR_PARTITION
            )
            if v >= 5:
                answer["error_message"] = str(exc)
        results.append(answer)
    return build_response(DELETE_TOPICS, v, responses=results)


@handles(CREATE_PARTITIONS, 0, 3)
async def create_partitions(ctx: RequestContext, body):
    logs = logs_of(ctx)
    known = logs.topics()
    added = sum(max(0, t.count - known[t.name].partitions) for t in body.topics if t.name in known)
    results = []
    for topic in body.topics:
        answer = {"name": topic.name, "error_code": ec.NONE, "error_message": None}
        try:
            if not may_alter_topic(ctx, topic.name):
                raise _Refused(ec.TOPIC_AUTHORIZATION_FAILED,
                               f"{ctx.principal} lacks Alter on the topic")
            if added > MAX_PARTITIONS_PER_REQUEST:
                raise _Refused(POLICY_VIOLATION, TOO_MANY_PARTITIONS)
            logs.create_partitions(topic.name, topic.count, validate_only=body.validate_only)
        except _Refused as refused:
            answer.update(error_code=refused.code, error_message=str(refused))
        except Exception as exc:
            answer.update(error_code=_error_of(exc), error_message=str(exc))
        results.append(answer)
    return build_response(CREATE_PARTITIONS, ctx.api_version, results=results)


def _config_row(entry, v: int, include_synonyms: bool, include_documentation: bool) -> dict:
    """One DescribeConfigs row from a ConfigEntry (topic) or BrokerEntry (broker)."""
    broker = isinstance(entry, BrokerEntry)
    row = {
        "name": entry.name,
        "value": entry.value,
        # Kafka's static broker configs cannot change while the broker runs; its dynamic
        # ones (dynamic_config.py) and topic configs can.
        "read_only": entry.read_only if broker else False,
        "config_source": entry.source,
        "is_sensitive": entry.sensitive if broker else False,
        "synonyms": [
            {"name": s.name, "value": s.value, "source": s.source}
            for s in (entry.synonyms if include_synonyms else ())
        ],
    }
    if v >= 3:
        row["config_type"] = entry.config_type
        row["documentation"] = entry.documentation if include_documentation else None
    return row


def _config_auth_error(resource_type: int) -> int:
    if resource_type == RESOURCE_TOPIC:
        return ec.TOPIC_AUTHORIZATION_FAILED
    return ec.CLUSTER_AUTHORIZATION_FAILED


@handles(DESCRIBE_CONFIGS, 1, 4)
async def describe_configs(ctx: RequestContext, body):
    logs = logs_of(ctx)
    v = ctx.api_version
    synonyms = bool(body.include_synonyms)
    documentation = v >= 3 and bool(body.include_documentation)
    results = []
    for res in body.resources:
        answer = {
            "error_code": ec.NONE,
            "error_message": None,
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
            "configs": [],
        }
        if (res.resource_type in (RESOURCE_TOPIC, RESOURCE_BROKER)
                and not may_describe_configs(ctx, res.resource_type, res.resource_name)):
            answer.update(error_code=_config_auth_error(res.resource_type),
                          error_message=f"{ctx.principal} lacks DescribeConfigs")
            results.append(answer)
            continue
        if res.resource_type == RESOURCE_TOPIC:
            try:
                info = logs.topic(res.resource_name)
            except UnknownTopicError as exc:
                answer.update(error_code=ec.UNKNOWN_TOPIC_OR_PARTITION, error_message=str(exc))
                results.append(answer)
                continue
            names = list(res.configuration_keys) if res.configuration_keys else None
            answer["configs"] = [
                _config_row(e, v, synonyms, documentation)
                for e in info.config.describe(names, ctx.broker.broker_synonym_levels())
            ]
        elif res.resource_type == RESOURCE_BROKER:
            if res.resource_name not in ("", str(ctx.broker.node_id)):
                answer.update(
                    error_code=ec.INVALID_REQUEST,
                    error_message=f"no broker {res.resource_name!r} here",
                )
            else:
                keys = set(res.configuration_keys or ())
                rows = (describe_default(ctx.broker) if res.resource_name == ""
                        else describe_broker(ctx.broker))
                answer["configs"] = [
                    _config_row(e, v, synonyms, documentation)
                    for e in rows
                    if not keys or e.name in keys
                ]
        else:
            answer.update(
                error_code=ec.INVALID_REQUEST,
                error_message=f"resource type {res.resource_type} has no configs here",
            )
        results.append(answer)
    return build_response(DESCRIBE_CONFIGS, v, results=results)


def _alter_one(ctx: RequestContext, res, validate_only: bool, incremental: bool) -> dict:
    logs = logs_of(ctx)
    answer = {
        "error_code": ec.NONE,
        "error_message": None,
        "resource_type": res.resource_type,
        "resource_name": res.resource_name,
    }
    if (res.resource_type in (RESOURCE_TOPIC, RESOURCE_BROKER)
            and not may_alter_configs(ctx, res.resource_type, res.resource_name)):
        answer.update(error_code=_config_auth_error(res.resource_type),
                      error_message=f"{ctx.principal} lacks AlterConfigs")
        return answer
    if res.resource_type == RESOURCE_BROKER:
        return _alter_broker(ctx, res, validate_only, incremental, answer)
    if res.resource_type != RESOURCE_TOPIC:
        answer.update(
            error_code=ec.INVALID_REQUEST,
            error_message="AlterConfigs is only supported for topics and brokers, but "
            f"resource type is {res.resource_type}",
        )
        return answer
    try:
        if incremental:
            _check_incremental_request(res.configs)
        info = logs.topic(res.resource_name)
        if not incremental:
            logs.alter_topic_config(
                res.resource_name,
                {c.name: c.value for c in res.configs},
                validate_only=validate_only,
            )
            return answer
        current = dict(info.config.overrides)
        set_values: dict[str, str] = {}
        deleted: list[str] = []
        for c in res.configs:
            if c.config_operation == OP_SET:
                set_values[c.name] = c.value
            elif c.config_operation == OP_DELETE:
                deleted.append(c.name)
            elif c.config_operation in (OP_APPEND, OP_SUBTRACT):
                definition = CONFIG_BY_NAME.get(c.name)
                # Kafka's controller: an unknown name is no list either.
                if definition is None or definition.config_type != TYPE_LIST:
                    raise _Refused(INVALID_CONFIG, f"Can't {_OP_NAMES[c.config_operation]} to "
                                   f"key {c.name} because its type is not LIST.")
                base = current.get(c.name, definition.render(definition.default))
                set_values[c.name] = altered_list(base, c.value, c.config_operation == OP_APPEND)
            else:
                raise InvalidConfigError(c.name, c.value, f"unknown operation {c.config_operation}")
        logs.incremental_alter_topic_config(
            res.resource_name, set_values, deleted, validate_only=validate_only
        )
    except _Refused as refused:
        answer.update(error_code=refused.code, error_message=str(refused))
    except Exception as exc:
        answer.update(error_code=_error_of(exc), error_message=str(exc))
    return answer


_OP_NAMES = {OP_SET: "SET", OP_DELETE: "DELETE", OP_APPEND: "APPEND", OP_SUBTRACT: "SUBTRACT"}


def _check_incremental_request(configs) -> None:
    """Kafka's first checks of one resource of IncrementalAlterConfigs (INVALID_REQUEST)."""
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise _Refused(ec.INVALID_REQUEST, "Error due to duplicate config keys")
    null = [c.name for c in configs if c.config_operation != OP_DELETE and c.value is None]
    if null:
        raise _Refused(ec.INVALID_REQUEST, "Null value not supported for : " + ", ".join(null))


def _alter_broker(ctx: RequestContext, res, validate_only: bool, incremental: bool,
                  answer: dict) -> dict:
    """KIP-226: a per-broker (name = node id) or cluster-default (empty name) update, with
    Kafka's checks and its INVALID_REQUEST refusals (Kafka 4.x's words)."""
    broker = ctx.broker
    name = res.resource_name
    if name not in ("", str(broker.node_id)):
        answer.update(error_code=ec.INVALID_REQUEST,
                      error_message=f"Unexpected broker id, expected {broker.node_id} or "
                      f"empty string, but received {name}")
        return answer
    per_broker = name != ""
    current = broker.dynamic.level(per_broker)
    updates: dict[str, str | None] = {}
    try:
        if not incremental:
            # AlterConfigs replaces the level's whole set, as Kafka's does.
            new = {c.name: c.value for c in res.configs if c.value is not None}
            updates = {n: None for n in current if n not in new}
            updates.update(new)
        else:
            _check_incremental_request(res.configs)
            new = dict(current)
            for c in res.configs:
                if c.config_operation == OP_SET:
                    new[c.name] = c.value
                    updates[c.name] = c.value
                elif c.config_operation == OP_DELETE:
                    new.pop(c.name, None)
                    updates[c.name] = None
                elif c.config_operation in (OP_APPEND, OP_SUBTRACT):
                    default = _broker_list_default(c.name, c.config_operation)
                    # The level's own value, else Kafka's built-in default: neither the other
                    # level nor the --config value (Kafka's controller does the same).
                    new[c.name] = altered_list(new.get(c.name, default), c.value,
                                               c.config_operation == OP_APPEND)
                    updates[c.name] = new[c.name]
                else:
                    raise DynamicConfigError(f"unknown operation {c.config_operation}")
            new = {k: v for k, v in new.items() if v is not None}
        validate(updates, per_broker, known_names())
        levels = (new, broker.dynamic.default) if per_broker else (
            broker.dynamic.per_broker, new)
        broker.apply_dynamic(*levels, validate_only=validate_only)
    except _Refused as refused:
        answer.update(error_code=refused.code, error_message=str(refused))
    except (DynamicConfigError, ValueError) as exc:
        answer.update(error_code=ec.INVALID_REQUEST, error_message=str(exc))
    return answer


def _broker_list_default(name: str, operation: int) -> str:
    """Kafka's default of the LIST broker config ``name``; INVALID_CONFIG when it is no list
    (the forwarding broker's words; for a name Kafka does not know at all the words it means
    to send, where Kafka 4.0 answers UNKNOWN_SERVER_ERROR without a message)."""
    default = list_default(name)
    if default is None:
        if name not in known_names() and not is_dynamic(name):
            raise _Refused(INVALID_CONFIG, f"Unknown config name: {name}")
        verb = "append" if operation == OP_APPEND else "subtract"
        raise _Refused(INVALID_CONFIG,
                       f"Config value {verb} is not allowed for config key: {name}")
    return default


@handles(ALTER_CONFIGS, 0, 2)
async def alter_configs(ctx: RequestContext, body):
    results = [_alter_one(ctx, res, body.validate_only, False) for res in body.resources]
    return build_response(ALTER_CONFIGS, ctx.api_version, responses=results)


@handles(INCREMENTAL_ALTER_CONFIGS, 0, 1)
async def incremental_alter_configs(ctx: RequestContext, body):
    results = [_alter_one(ctx, res, body.validate_only, True) for res in body.resources]
    return build_response(INCREMENTAL_ALTER_CONFIGS, ctx.api_version, responses=results)


@handles(DELETE_RECORDS, 0, 2)
async def delete_records(ctx: RequestContext, body):
    logs = logs_of(ctx)
    topics = []
    for topic in body.topics:
        info = logs.topics().get(topic.name)
        deletable = may_delete_topic(ctx, topic.name)
        partitions = []
        for p in topic.partitions:
            answer = {
                "partition_index": p.partition_index,
                "low_watermark": -1,
                "error_code": ec.NONE,
            }
            log_, answer["error_code"] = partition_log(
                logs, info, topic.name, p.partition_index, deletable)
            if log_ is not None:
                target = log_.high_watermark if p.offset == -1 else p.offset
                try:
                    answer["low_watermark"] = log_.delete_records_before(target)
                except OffsetOutOfRangeError:
                    answer["error_code"] = ec.OFFSET_OUT_OF_RANGE
            partitions.append(answer)
        topics.append({"name": topic.name, "partitions": partitions})
    return build_response(DELETE_RECORDS, ctx.api_version, topics=topics)
