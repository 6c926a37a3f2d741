"""The one client config table (src/kipproducer/client_config.py): the docs are its output, the
engine, the Producer's split and the producer groups read it, one boolean parser, and errors
that name the property and what it accepts. No broker needed."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import confluent_kafka
import pytest

from kipproducer import client_config
from kipproducer.client_config import ENGINE, GROUP, KIP, MEMBER, PROPERTIES
from kipproducer.engine.config import ConfigError, EngineConfig
from kipproducer.producer_group import GROUP_PROPERTIES, MEMBER_PROPERTIES, split_config

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "kipproducer"
BEGIN = "<!-- generated: python -m kipproducer.config_docs (tests/test_client_config.py) -->"
END = "<!-- end generated -->"
BOOTSTRAP = {"bootstrap.servers": "127.0.0.1:1"}


def _generated_part(page: Path) -> str:
    text = page.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, f"{page.name}: markers"
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip() + "\n"


def test_docs_table_is_the_commands_output():
    run = subprocess.run([sys.executable, "-m", "kipproducer.config_docs"],
                         capture_output=True, text=True, check=True)
    printed = run.stdout
    assert not run.stderr
    assert printed == client_config.table(client_config.of_scope(ENGINE, KIP))
    assert _generated_part(ROOT / "docs" / "producer.md") == printed, (
        "docs/producer.md's config table differs from the table: paste the output of "
        "`python -m kipproducer.config_docs` between its markers")


def _markdown_rows(page: Path, header: str) -> dict[str, str]:
    """{property name or alias: default cell} of the table under ``header``."""
    lines = page.read_text().splitlines()
    start = lines.index(header) + 2
    rows = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        for name in re.findall(r"`([^`]+)`", cells[0]):
            rows[name] = cells[1]
    return rows


def test_producer_groups_page_names_the_tables_group_properties():
    """docs/producer-groups.md keeps its own words; its names and numeric defaults are the
    table's."""
    rows = _markdown_rows(ROOT / "docs" / "producer-groups.md",
                          "| property | default | meaning |")
    group = client_config.of_scope(GROUP, MEMBER)
    assert set(rows) == {p.name for p in group}
    for prop in group:
        if isinstance(prop.default, int):
            assert str(prop.default) in rows[prop.name], prop.name


def test_every_property_and_alias_is_in_the_table_once():
    names = [n for p in PROPERTIES for n in p.names]
    assert len(names) == len(set(names))
    assert all(p.scope in client_config.SCOPES and p.doc and "\n" not in p.doc
               for p in PROPERTIES)
    assert all(p.name.startswith("kip.") == (p.scope == KIP) for p in PROPERTIES)


def test_engine_config_fields_and_defaults_come_from_the_table():
    kept = {p.field: p for p in PROPERTIES if p.field}
    plain = {f.name for f in fields(EngineConfig)} - {"sasl", "tls"}
    assert set(kept) == plain
    config = EngineConfig.from_properties(BOOTSTRAP)
    for name, prop in kept.items():
        if name != "bootstrap_servers":
            assert getattr(config, name) == prop.default, name
    assert GROUP_PROPERTIES == client_config.defaults(GROUP)
    assert MEMBER_PROPERTIES == client_config.defaults(MEMBER)


@pytest.mark.parametrize("prop", [p for p in PROPERTIES if p.field and p.aliases],
                         ids=lambda p: p.name)
def test_an_alias_sets_what_its_name_sets(prop):
    sample, other = {"bootstrap_servers": ("10.0.0.1:9", "10.0.0.2:9"), "acks": ("1", "0"),
                     "linger_ms": ("7", "8"), "compression": ("gzip", "lz4"),
                     "max_in_flight": ("3", "2"), "retries": ("4", "6"),
                     "delivery_timeout_ms": ("1234", "4321")}[prop.field]
    base = {} if prop.field == "bootstrap_servers" else BOOTSTRAP
    by_name = EngineConfig.from_properties({**base, prop.name: sample})
    for alias in prop.aliases:
        by_alias = EngineConfig.from_properties({**base, alias: sample})
        assert getattr(by_alias, prop.field) == getattr(by_name, prop.field)
        assert getattr(by_alias, prop.field) != prop.default
    # given under both names, the later one wins (librdkafka's rule)
    later = EngineConfig.from_properties({**base, prop.name: sample, prop.aliases[0]: other})
    first = EngineConfig.from_properties({**base, prop.aliases[0]: other, prop.name: sample})
    assert getattr(later, prop.field) != getattr(first, prop.field)
    assert getattr(first, prop.field) == getattr(by_name, prop.field)


@pytest.mark.parametrize("word,meaning", [
    ("true", True), ("TRUE", True), ("t", True), ("1", True), ("yes", True), (True, True),
    ("false", False), ("False", False), ("F", False), ("0", False), ("no", False),
    (False, False)])
def test_one_boolean_parser_for_every_boolean_property(word, meaning):
    """Before the table, kip.* booleans took yes/no and the TLS one did not, and neither took
    librdkafka's t / f."""
    assert EngineConfig.from_properties(
        {**BOOTSTRAP, "kip.delivery.report.per.record": word}).per_record_reports is meaning
    assert EngineConfig.from_properties(
        {**BOOTSTRAP, "enable.idempotence": word}).enable_idempotence is meaning
    tls = EngineConfig.from_properties({**BOOTSTRAP, "security.protocol": "ssl",
                                        "enable.ssl.certificate.verification": word}).tls
    assert tls is not None and tls.context.check_hostname is meaning


def test_the_engine_takes_every_boolean_librdkafka_takes():
    """A Producer that librdkafka accepts must not fail at its first bulk call over a boolean
    spelling (librdkafka took ``t`` where the engine refused it)."""
    for word in ("true", "True", "t", "T", "1", "false", "FALSE", "f", "0", "yes", "no"):
        try:
            confluent_kafka.Producer({**BOOTSTRAP, "enable.idempotence": word}).flush(0)
        except confluent_kafka.KafkaException as exc:
            assert word in ("yes", "no"), f"librdkafka refused {word!r}: {exc}"
            continue
        assert client_config.parse_bool(word) is (word.lower() in ("true", "t", "1", "yes"))


def test_no_other_boolean_parser_in_the_client():
    """Client code spells booleans once (client_config.TRUE_WORDS); the broker's own config
    and the Spark options (true/false, Spark's) are not client properties."""
    outside = ("broker/", "spark/", "client_config.py")
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(outside):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple) and {"true", "false"} & {
                    e.value for e in node.elts if isinstance(e, ast.Constant)}:
                found.append(f"{rel}:{node.lineno}")
    assert not found, f"boolean spellings outside client_config.py: {found}"


def test_bad_values_name_the_property_and_what_is_accepted():
    cases = [
        ({"kip.delivery.report.per.record": "maybe"},
         "kip.delivery.report.per.record='maybe': expected true or false"),
        ({"batch.size": "big"}, "batch.size='big': expected an integer"),
        ({"linger.ms": "soon"}, "linger.ms='soon': expected a number"),
        ({"queue.buffering.max.ms": "soon"}, "queue.buffering.max.ms='soon': expected a number"),
        ({"acks": "2"}, "acks='2': expected all, -1, 0 or 1"),
        ({"kip.mode": "fast"}, "kip.mode='fast': expected native, emulated or auto"),
        ({"kip.emulation.probe.topic": 5}, "kip.emulation.probe.topic=5: expected a string"),
        ({"security.protocol": "tls"},
         "security.protocol='tls': expected plaintext, ssl, sasl_plaintext or sasl_ssl"),
        ({"bootstrap.servers": "nohost"}, "bootstrap.servers='nohost': 'nohost' is not"),
        ({"partitioner": "roundrobin"}, "partitioner='roundrobin': expected consistent_random, "),
    ]
    for props, message in cases:
        with pytest.raises(ConfigError) as info:
            EngineConfig.from_properties({**BOOTSTRAP, **props})
        assert message in str(info.value), (props, str(info.value))


def test_unknown_kip_property_names_it_and_the_known_ones():
    with pytest.raises(ConfigError) as info:
        client_config.check_kip_properties({"kip.delivery.report.per.recrod": "true"})
    text = str(info.value)
    assert "'kip.delivery.report.per.recrod'" in text
    assert "did you mean 'kip.delivery.report.per.record'" in text
    assert all(p.name in text for p in client_config.of_scope(KIP))


def test_the_producers_split():
    conf = {**BOOTSTRAP, "kip.mode": "native", "linger.ms": 3, "group.id": "g",
            "source.partition.count": "4", "session.timeout.ms": 10_000}
    librdkafka = client_config.librdkafka_properties(conf)
    assert "kip.mode" not in librdkafka and librdkafka["linger.ms"] == 3
    producer_conf, settings = split_config(librdkafka)
    assert settings is not None and set(producer_conf) == {"bootstrap.servers", "linger.ms"}
    assert settings["source.partition.count"] == 4
    assert settings["max.alive.interval.ms"] == client_config.default("max.alive.interval.ms")
    assert settings["positions.topic"] == "__kip_positions_g"
    # without a group property the config is librdkafka's unchanged
    assert split_config({**BOOTSTRAP, "group.id": "g"}) == ({**BOOTSTRAP, "group.id": "g"}, None)
    for bad, message in ((True, "expected an integer, not a bool"), ("0", "expected a number >= 1"),
                         ("x", "expected an integer")):
        with pytest.raises(ConfigError, match=f"source.partition.count=.*{message}"):
            split_config({"group.id": "g", "source.partition.count": bad})
