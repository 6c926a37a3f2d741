"""The one table of the client properties kipproducer reads: each property once, with its
aliases, what it accepts, its default and a line of documentation.

Everything else reads it: the engine's configuration (engine/config.py), the Producer's split
of a config dict between librdkafka and kipproducer (producer.py), the producer groups'
settings (producer_group.py) and the table "Configuration the engine reads" of
docs/producer.md, which config_docs.py prints::

    python -m kipproducer.config_docs            # the engine's and kip.* properties
    python -m kipproducer.config_docs --scope group

(tests/test_client_config.py fails when the page and the output differ). Like librdkafka's
CONFIGURATION.md, generated from its one property table.

Scopes say who reads a property and where the Producer sends it:

* ``engine``: librdkafka's own property, read by the sending engine too (same name, same
  default); it stays in the config librdkafka gets.
* ``kip``: kipproducer's own (``kip.*``); never given to librdkafka. An unknown ``kip.*`` name
  is an error when the Producer is built.
* ``group`` / ``member``: producer groups (docs/producer-groups.md); taken out of librdkafka's
  producer config when group mode is on (any ``group`` property given). ``member`` ones go to
  the group's internal consumer.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ENGINE, KIP, GROUP, MEMBER = "engine", "kip", "group", "member"
SCOPES = (ENGINE, KIP, GROUP, MEMBER)
KIP_PREFIX = "kip."


class ConfigError(ValueError):
    """A client property has a bad value, or a kip.* property is unknown; the message names the
    property and what it accepts."""


# ---- the value parsers (each raises ValueError saying what is accepted) ----------------------

#: The one set of boolean spellings (any case): librdkafka's (true/t/1, false/f/0), so the
#: engine takes every value librdkafka's lane does, and yes/no, which kip.* always took.
#: librdkafka checks its own properties as well when the Producer is built (it refuses yes/no).
TRUE_WORDS = ("true", "t", "1", "yes")
FALSE_WORDS = ("false", "f", "0", "no")


def parse_bool(value: Any) -> bool:
    """A boolean property's value: a bool, or one of TRUE_WORDS / FALSE_WORDS in any case."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise ValueError("expected true or false")


def parse_int(value: Any) -> int:
    """An integer property's value: an int or its decimal text (a bool is refused)."""
    if isinstance(value, bool):
        raise ValueError("expected an integer, not a bool")
    if isinstance(value, int):
        return value
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError("expected an integer") from None


def parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a number, not a bool")
    try:
        return float(str(value).strip())
    except ValueError:
        raise ValueError("expected a number") from None


def parse_text(value: Any) -> str:
    """kipproducer's own text properties take a str only (nothing is converted silently)."""
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def parse_acks(value: Any) -> int:
    text = str(value).strip().lower()
    if text == "all":
        return -1
    try:
        acks = int(text)
    except ValueError:
        acks = None
    if acks not in (-1, 0, 1):
        raise ValueError("expected all, -1, 0 or 1")
    return acks


def parse_servers(value: Any) -> list[tuple[str, int]]:
    """bootstrap.servers: ``host:port[,host:port...]`` (a ``scheme://`` prefix is dropped)."""
    out = []
    for item in str(value).split(","):
        item = item.strip()
        if not item:
            continue
        if "://" in item:
            item = item.split("://", 1)[1]
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"{item!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ValueError("no broker address")
    return out


def parse_callable(value: Any) -> Any:
    if value is not None and not callable(value):
        raise ValueError("expected a callable")
    return value


# ---- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Property:
    name: str
    scope: str
    #: Turns a given value into what the code uses; ValueError says what is accepted.
    parse: Callable[[Any], Any]
    #: The value when the property is not given (None: none, or required).
    default: Any
    doc: str
    aliases: tuple[str, ...] = ()
    #: Accepted values (compared lower-case); empty: any the parser takes.
    choices: tuple[str, ...] = ()
    #: Smallest accepted value of a number.
    minimum: int | None = None
    #: EngineConfig's attribute the engine keeps it in (None: read where it is used).
    field: str | None = None
    #: How the docs show the default when the value alone would not say it.
    shown_default: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def value(self, raw: Any, given_as: str | None = None) -> Any:
        """``raw`` parsed and checked; ConfigError naming the property (as given: ``given_as``,
        an alias) and what it accepts."""
        try:
            value = self.parse(raw)
            if self.choices and str(value).strip().lower() not in self.choices:
                raise ValueError(f"expected {', '.join(self.choices[:-1])} or "
                                 f"{self.choices[-1]}")
            if self.minimum is not None and value < self.minimum:
                raise ValueError(f"expected a number >= {self.minimum}")
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{given_as or self.name}={raw!r}: {exc}") from None
        if self.choices:
            value = str(value).strip().lower()
        return value

    def default_text(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        if self.default is None:
            return "(none)"
        if self.default == "":
            return "empty"
        if isinstance(self.default, bool):
            return f"`{str(self.default).lower()}`"
        return f"`{self.default}`"


def _p(name: str, scope: str, parse: Callable[[Any], Any], default: Any, doc: str,
       **more: Any) -> Property:
    return Property(name, scope, parse, default, doc, **more)


PROPERTIES: tuple[Property, ...] = (
    # -- librdkafka's properties the engine reads (same names, same defaults) --
    _p("bootstrap.servers", ENGINE, parse_servers, None, "brokers to start from",
       aliases=("metadata.broker.list",), field="bootstrap_servers",
       shown_default="(required)"),
    _p("client.id", ENGINE, str, "rdkafka", "sent in every request header", field="client_id"),
    _p("acks", ENGINE, parse_acks, -1, "0, 1 or all", aliases=("request.required.acks",),
       field="acks", shown_default="`all`"),
    _p("enable.idempotence", ENGINE, parse_bool, False,
       "producer id + sequences; needs acks=all, max.in.flight <= 5",
       field="enable_idempotence"),
    _p("linger.ms", ENGINE, parse_float, 5.0, "how long a batch may wait for more records",
       aliases=("queue.buffering.max.ms",), field="linger_ms", shown_default="`5`"),
    _p("batch.size", ENGINE, parse_int, 1_000_000, "bytes per batch", field="batch_size"),
    _p("batch.num.messages", ENGINE, parse_int, 10_000, "records per batch",
       field="batch_num_messages"),
    _p("compression.type", ENGINE, str, None, "none, gzip, snappy, lz4, zstd",
       aliases=("compression.codec",), field="compression", shown_default="`none`"),
    _p("message.max.bytes", ENGINE, parse_int, 1_000_000,
       "largest record (key + value) accepted", field="message_max_bytes"),
    _p("max.in.flight", ENGINE, parse_int, 1_000_000, "Produce requests in flight per broker",
       aliases=("max.in.flight.requests.per.connection",), field="max_in_flight",
       shown_default="`1000000` (5 with idempotence)"),
    _p("retries", ENGINE, parse_int, 2_147_483_647, "resends of a batch",
       aliases=("message.send.max.retries",), field="retries"),
    _p("retry.backoff.ms", ENGINE, parse_int, 100,
       "first backoff between resends (doubles per resend up to retry.backoff.max.ms)",
       field="retry_backoff_ms"),
    _p("retry.backoff.max.ms", ENGINE, parse_int, 1000, "longest backoff between resends",
       field="retry_backoff_max_ms"),
    _p("delivery.timeout.ms", ENGINE, parse_int, 300_000,
       "a record not delivered by then fails with `_MSG_TIMED_OUT`",
       aliases=("message.timeout.ms",), field="delivery_timeout_ms"),
    _p("request.timeout.ms", ENGINE, parse_int, 30_000,
       "a request not answered by then: connection closed, batches resent",
       field="request_timeout_ms"),
    _p("queue.buffering.max.messages", ENGINE, parse_int, 100_000,
       "records queued and in flight", field="queue_max_messages"),
    _p("queue.buffering.max.kbytes", ENGINE, parse_int, 1_048_576,
       "bytes queued and in flight", field="queue_max_kbytes"),
    # librdkafka's partitioners, each reproduced exactly by engine/partitioner.py
    _p("partitioner", ENGINE, str, "consistent_random",
       "consistent, consistent_random, murmur2, murmur2_random, fnv1a, fnv1a_random, random",
       field="partitioner", choices=("consistent_random", "consistent", "random", "murmur2",
                                     "murmur2_random", "fnv1a", "fnv1a_random")),
    _p("socket.timeout.ms", ENGINE, parse_int, 60_000, "connect timeout",
       field="socket_timeout_ms"),
    _p("topic.metadata.refresh.interval.ms", ENGINE, parse_int, 300_000,
       "metadata of the known topics is refreshed this often (`-1`: only when needed); "
       "besides, a refused or lost connection, a request timed out or a broker's leadership "
       "error marks it stale and refreshes it at once (at most once per `retry.backoff.ms`), "
       "so batches move to a new leader", field="metadata_refresh_ms"),
    _p("reconnect.backoff.ms", ENGINE, parse_int, 100,
       "a broker's next connection attempt waits this long after its last one, doubling per "
       "attempt up to `reconnect.backoff.max.ms`, with -25%..+50% jitter; back to the start "
       "once attempts are more than the max apart", field="reconnect_backoff_ms"),
    _p("reconnect.backoff.max.ms", ENGINE, parse_int, 10_000,
       "the longest wait between two connection attempts to a broker",
       field="reconnect_backoff_max_ms"),
    _p("allow.auto.create.topics", ENGINE, parse_bool, True,
       "a topic the librdkafka lane would create (the broker allowing it) is created for the "
       "engine's lane too", field="allow_auto_create_topics"),
    _p("security.protocol", ENGINE, str, "plaintext",
       "`plaintext`, `ssl`, `sasl_plaintext` or `sasl_ssl` (any case)",
       choices=("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")),
    _p("sasl.mechanism", ENGINE, str, "GSSAPI",
       "with `sasl_plaintext` / `sasl_ssl`: `PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512` or "
       "`OAUTHBEARER` (exact names); any other, the default GSSAPI included, makes the first "
       "engine call raise `ConfigError` (GSSAPI stays on librdkafka's lane: `produce()`, and "
       "transactions as above)", aliases=("sasl.mechanisms",)),
    _p("sasl.username", ENGINE, str, None, "the PLAIN / SCRAM user name; required with them"),
    _p("sasl.password", ENGINE, str, None, "the PLAIN / SCRAM password; required with them"),
    _p("oauth_cb", ENGINE, parse_callable, None,
       "OAUTHBEARER: confluent-kafka's callable, `oauth_cb(sasl.oauthbearer.config)` returning "
       "`(token, expiry)` (seconds since the epoch) or `(token, expiry, principal, "
       "extensions)`; the engine asks again at 80% of a token's lifetime"),
    _p("sasl.oauthbearer.config", ENGINE, str, "",
       "OAUTHBEARER without `oauth_cb`: with `enable.sasl.oauthbearer.unsecure.jwt`, unsecured "
       "JWTs from `principal=... lifeSeconds=... scope=... extension_NAME=...` (tests only)"),
    _p("enable.sasl.oauthbearer.unsecure.jwt", ENGINE, parse_bool, False,
       "`true`: OAUTHBEARER tokens made from `sasl.oauthbearer.config` (tests only)"),
    _p("sasl.oauthbearer.method", ENGINE, str, "default",
       "`oidc`: tokens from an OAuth 2.0 token endpoint (the client-credentials grant, as "
       "librdkafka's OIDC client), used until 80% of their `exp`; an `oauth_cb` wins over it",
       choices=("default", "oidc")),
    _p("sasl.oauthbearer.token.endpoint.url", ENGINE, str, "",
       "oidc: the token endpoint (`http://` or `https://`); the engine POSTs "
       "`grant_type=client_credentials` (and `scope`) with HTTP basic authentication and "
       "takes the answer's `access_token`; an error names the endpoint and fails the records"),
    _p("sasl.oauthbearer.client.id", ENGINE, str, "", "oidc: the client id (basic auth user)",
       aliases=("sasl.oauthbearer.client.credentials.client.id",)),
    _p("sasl.oauthbearer.client.secret", ENGINE, str, "",
       "oidc: the client secret (basic auth password)",
       aliases=("sasl.oauthbearer.client.credentials.client.secret",)),
    _p("sasl.oauthbearer.scope", ENGINE, str, "", "oidc: the scope asked for (none: not sent)"),
    _p("sasl.oauthbearer.extensions", ENGINE, str, "",
       "oidc: SASL extensions sent with the token, `key=value,key=value`"),
    _p("sasl.oauthbearer.sub.claim.name", ENGINE, str, "sub",
       "oidc: the JWT claim that must name the principal (non-empty)"),
    _p("sasl.oauthbearer.grant.type", ENGINE, str, "client_credentials",
       "oidc: only `client_credentials` in the engine (the jwt-bearer grant raises "
       "`ConfigError`: fetch such tokens in an `oauth_cb`)",
       choices=("client_credentials", "urn:ietf:params:oauth:grant-type:jwt-bearer")),
    _p("https.ca.location", ENGINE, str, "",
       "oidc: CA file or directory an `https://` token endpoint is checked against",
       shown_default="(the system's CA store)"),
    _p("https.ca.pem", ENGINE, str, "", "oidc: the token endpoint's CA certificates as PEM "
       "text"),
    _p("ssl.ca.location", ENGINE, str, "",
       "CA file or directory the broker's certificate is checked against",
       shown_default="(the system's CA store)"),
    _p("ssl.ca.pem", ENGINE, str, "", "CA certificates as PEM text (with or instead of "
       "`ssl.ca.location`)"),
    _p("ssl.certificate.location", ENGINE, str, "",
       "the client certificate for mTLS (PEM file)"),
    _p("ssl.certificate.pem", ENGINE, str, "", "the client certificate as PEM text"),
    _p("ssl.key.location", ENGINE, str, "", "the client certificate's key (PEM file)"),
    _p("ssl.key.pem", ENGINE, str, "", "the client certificate's key as PEM text"),
    _p("ssl.key.password", ENGINE, str, None, "opens an encrypted key"),
    _p("ssl.keystore.location", ENGINE, str, "",
       "the client certificate, its chain and key in one PKCS#12 file, instead of "
       "`ssl.certificate.*` + `ssl.key.*`; Java's JKS is refused (convert it: `keytool "
       "-importkeystore ... -deststoretype PKCS12`)"),
    _p("ssl.keystore.password", ENGINE, str, None,
       "opens `ssl.keystore.location`; required with it"),
    _p("ssl.endpoint.identification.algorithm", ENGINE, str, "https",
       "`https`: the broker's certificate must name the host in the address; `none`: not "
       "checked", choices=("https", "none")),
    _p("enable.ssl.certificate.verification", ENGINE, parse_bool, True,
       "`false`: no certificate check at all (tests only)"),
    _p("ssl.cipher.suites", ENGINE, str, "", "an OpenSSL cipher list",
       shown_default="(OpenSSL's)"),
    _p("transactional.id", ENGINE, str, None, "transactions through the engine (above)",
       field="transactional_id"),
    _p("transaction.timeout.ms", ENGINE, parse_int, 60_000,
       "sent with InitProducerId; bounds `delivery.timeout.ms` and the calls' default timeout",
       field="transaction_timeout_ms"),
    # -- kipproducer's own --
    _p("kip.delivery.report.per.record", KIP, parse_bool, False,
       "produce_arrays reports per record", field="per_record_reports"),
    _p("kip.switch.interval.ms", KIP, parse_float, 0.5,
       "when the engine starts, Python's thread switch interval (`sys.setswitchinterval`, "
       "process-wide; 5 ms by Python's default) is lowered to this: the engine's sender "
       "thread otherwise waits up to the interval for the interpreter lock while the "
       "calling thread appends, and a TLS connection, which needs that thread for every "
       "record of the wire, is held back by it (produce_batch over TLS ran at 0.85-1.0 "
       "M records/s with 5 ms, 1.4-1.5 M with 0.5 ms); never raised; `0` leaves it alone",
       minimum=0),
    _p("kip.mode", KIP, str, "auto",
       "how `offset=` / `expected_offset=` reach a topic: `native` (the wire extension of "
       "`kip broker`, docs/protocol.md; refused where the broker lacks it), `emulated` "
       "(Kafka's own transactions on any broker that has them, "
       "[stock-clusters.md](stock-clusters.md)), `auto` (native where the partition leaders "
       "announce the features, emulated elsewhere); `Producer.kip_mode(topic)` tells which a "
       "topic gets. Not the Spark sink's option of the same name (docs/spark.md)",
       choices=("native", "emulated", "auto")),
    _p("kip.transaction.protocol", KIP, str, "auto",
       "the client flow of the engine's transactions: `auto` speaks Transactions V2 "
       "(KIP-890: no AddPartitionsToTxn before a partition's first batch, no "
       "AddOffsetsToTxn, the epoch bumped by every EndTxn) where the cluster finalizes "
       "`transaction.version` >= 2 and serves Produce v12 and EndTxn v5, the classic flow "
       "elsewhere; `classic` always the classic flow; `v2` V2, and a fatal error where the "
       "cluster cannot run it. Emulated offsets' gap transactions take the classic flow "
       "unless this is set (V2 saves a gap nothing, measured)",
       field="transaction_protocol", choices=("auto", "classic", "v2")),
    _p("kip.emulation.transactional.id", KIP, parse_text, "",
       "emulated `offset=`: the transactional id of this writer, the same across its restarts "
       "(a restarted writer fences its predecessor and aborts its open transaction before "
       "reading the log end); empty refuses emulated `offset=`. Emulated "
       "`expected_key_offset=`: the writer's id too (empty: a random one)"),
    _p("kip.emulation.key.retention", KIP, parse_bool, False,
       "emulated `expected_key_offset=` on a topic whose cleanup policy deletes records by "
       "age or size (`delete` with a finite `retention.ms` or `retention.bytes`): refused "
       "unless `true`; then a key whose last record was deleted answers as absent, as in "
       "native mode ([per-key-conditional.md](per-key-conditional.md))"),
    _p("kip.emulation.key.index.topic", KIP, parse_text, "",
       "emulated `expected_key_offset=`: a compacted topic (created when missing) where each "
       "conditional transaction also writes the key answers that changed and a checkpoint, "
       "so a new writer reads that and the partition's tail instead of the whole partition "
       "([per-key-conditional.md](per-key-conditional.md)); empty: a new writer reads the "
       "partition"),
    _p("kip.emulation.probe.topic", KIP, parse_text, "kip-emulation-probe",
       "emulated mode: the topic the capability probe writes one aborted record to (created "
       "with one partition when missing)"),
    # -- producer groups (docs/producer-groups.md) --
    _p("source.partition.count", GROUP, parse_int, None,
       "number of source partitions; the positions topic's partition count", minimum=1,
       shown_default="(required, >= 1)"),
    _p("max.alive.interval.ms", GROUP, parse_int, 300_000,
       "the longest time between two calls of the member (the internal consumer's "
       "`max.poll.interval.ms`); must be >= `session.timeout.ms`", minimum=1),
    _p("positions.commit.interval.ms", GROUP, parse_int, 60_000,
       "the periodic (KIP-910) commit", minimum=1),
    _p("update_offsets_cb", GROUP, parse_callable, None, "the KIP-910 hook"),
    _p("positions.topic", GROUP, str, None, "the positions topic",
       shown_default="`__kip_positions_<group.id>`"),
    _p("positions.commit.timeout.ms", GROUP, parse_int, 30_000,
       "bounds `subscribe()`, reading positions, and `commit_positions` without a timeout",
       minimum=1),
    _p("group.id", MEMBER, str, None,
       "the producer group (the consumer group on the positions topic)",
       shown_default="(required)"),
    _p("session.timeout.ms", MEMBER, parse_int, 45_000,
       "as a consumer's: a member not heard from (heartbeats, a background thread) for this "
       "long is removed", minimum=1),
    _p("group.instance.id", MEMBER, str, None, "static membership (KIP-345)"),
    _p("heartbeat.interval.ms", MEMBER, parse_int, None, "the internal consumer's heartbeats",
       shown_default="`session.timeout.ms / 10`, 100 to 3000"),
)

#: Every name and alias -> its property.
BY_NAME: dict[str, Property] = {n: p for p in PROPERTIES for n in p.names}


def of_scope(*scopes: str) -> tuple[Property, ...]:
    return tuple(p for p in PROPERTIES if p.scope in scopes)


def default(name: str) -> Any:
    """The default of ``name`` (a name or an alias) as the code uses it."""
    return BY_NAME[name].default


def defaults(*scopes: str) -> dict[str, Any]:
    """{name: default} of the properties of ``scopes``."""
    return {p.name: p.default for p in of_scope(*scopes)}


def value(props: Mapping[str, Any], name: str) -> Any:
    """``name``'s value in ``props`` (under its name or an alias; the later one given wins,
    as in librdkafka), parsed; its default when not given."""
    prop = BY_NAME[name]
    given = [(n, raw) for n, raw in props.items() if n in prop.names]
    if not given:
        return prop.default
    return parse(*given[-1])


def parse(name: str, raw: Any) -> Any:
    """``raw`` as the value of property ``name``; ConfigError naming it and what it accepts."""
    prop = BY_NAME.get(name)
    if prop is None:
        raise unknown(name)
    return prop.value(raw, name)


def unknown(name: str) -> ConfigError:
    """The error for a ``kip.*`` name that is not in the table (with the nearest names)."""
    known = sorted(p.name for p in of_scope(KIP))
    close = difflib.get_close_matches(name, known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"unknown kipproducer property {name!r}{hint}; known: "
                       + ", ".join(known))


def check_kip_properties(props: Mapping[str, Any]) -> None:
    """ConfigError for an unknown ``kip.*`` name or a bad value of a known one."""
    for name, raw in props.items():
        if name.startswith(KIP_PREFIX):
            prop = BY_NAME.get(name)
            if prop is None or prop.scope != KIP:
                raise unknown(name)
            prop.value(raw)


def librdkafka_properties(props: Mapping[str, Any]) -> dict[str, Any]:
    """What librdkafka's producer gets of ``props``: all but kipproducer's own (``kip.*``)."""
    return {k: v for k, v in props.items() if not k.startswith(KIP_PREFIX)}


# ---- the docs --------------------------------------------------------------------------------

HEADER = ("| property | default | meaning for the engine |", "|---|---|---|")
GROUP_HEADER = ("| property | default | meaning |", "|---|---|---|")


def table(properties: Iterable[Property], header: tuple[str, str] = HEADER) -> str:
    """The Markdown table of ``properties``: one row each, aliases after the name."""
    rows = list(header)
    for p in properties:
        names = " / ".join(f"`{n}`" for n in p.names)
        rows.append(f"| {names} | {p.default_text()} | {p.doc} |")
    return "\n".join(rows) + "\n"
