"""``kip configs`` (issue 27): describe and alter dynamic broker configs like
kafka-configs.sh --entity-type brokers."""

from __future__ import annotations

import pytest

from kipproducer import cli
from kipproducer.broker.embedded import EmbeddedBroker


@pytest.fixture
def embedded(tmp_path):
    broker = EmbeddedBroker(data_dir=str(tmp_path / "data"), config={"num.partitions": "2"})
    yield broker
    broker.close()


def kip_configs(capsys, bootstrap: str, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["configs", "--bootstrap-server", bootstrap, "--entity-type", "brokers",
                     *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_alter_and_describe_both_levels(embedded, capsys) -> None:
    bootstrap = embedded.bootstrap_servers
    code, out, _ = kip_configs(capsys, bootstrap, "--entity-default", "--alter",
                               "--add-config", "log.cleaner.threads=2,max.connections=900")
    assert (code, out) == (0, "Completed updating default config for brokers in the cluster.\n")
    code, out, _ = kip_configs(
        capsys, bootstrap, "--entity-name", "1", "--alter",
        "--add-config", "max.connections.per.ip.overrides=[127.0.0.2:1,127.0.0.3:2]")
    assert (code, out) == (0, "Completed updating config for broker 1.\n")

    code, out, _ = kip_configs(capsys, bootstrap, "--entity-name", "1", "--describe")
    assert code == 0
    assert out.splitlines() == [
        "Dynamic configs for broker 1 are:",
        "  max.connections.per.ip.overrides=127.0.0.2:1,127.0.0.3:2 sensitive=false synonyms="
        "{DYNAMIC_BROKER_CONFIG:max.connections.per.ip.overrides=127.0.0.2:1,127.0.0.3:2, "
        "DEFAULT_CONFIG:max.connections.per.ip.overrides=}",
    ]
    code, out, _ = kip_configs(capsys, bootstrap, "--entity-default", "--describe")
    assert out.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  log.cleaner.threads=2 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.cleaner.threads=2}",
        "  max.connections=900 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:max.connections=900}",
    ]
    code, out, _ = kip_configs(capsys, bootstrap, "--entity-name", "1", "--describe", "--all")
    assert "  num.partitions=2 sensitive=false synonyms={STATIC_BROKER_CONFIG:num.partitions=2, "\
           "DEFAULT_CONFIG:num.partitions=1}" in out.splitlines()

    code, out, _ = kip_configs(capsys, bootstrap, "--entity-default", "--alter",
                               "--delete-config", "max.connections")
    assert code == 0
    code, out, _ = kip_configs(capsys, bootstrap, "--entity-default", "--describe")
    assert "max.connections=" not in out and "log.cleaner.threads=2" in out


def test_refusals_and_usage_errors(embedded, capsys) -> None:
    bootstrap = embedded.bootstrap_servers
    code, out, err = kip_configs(capsys, bootstrap, "--entity-name", "1", "--alter",
                                 "--add-config", "num.partitions=3")
    assert code == 1 and out == ""
    assert err == ("kip configs: INVALID_REQUEST: Cannot update these configs "
                   "dynamically: [num.partitions]\n")
    code, _, err = kip_configs(capsys, bootstrap, "--describe")
    assert code == 2 and "--entity-name ID or --entity-default" in err
    code, _, err = kip_configs(capsys, bootstrap, "--entity-default", "--alter")
    assert code == 1 and "--add-config or --delete-config" in err
    code, _, err = kip_configs(capsys, bootstrap, "--entity-default", "--alter",
                               "--add-config", "novalue")
    assert code == 1 and "expected key=value" in err
