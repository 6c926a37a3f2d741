"""The `kip` command line (also `python -m kipproducer`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import configs_cli, groups_cli, mirror_cli, security_cli, transactions_cli
from .demo import TARGET_MODES


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    return demo.run(records=args.records, spark=not args.no_spark,
                    target_mode=args.target_mode)


def _config_pairs(pairs: list[str]) -> dict[str, str]:
    config = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise SystemExit(f"kip: --config wants key=value, got {pair!r}")
        config[name.strip()] = value.strip()
    return config


def _listen_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"kip: --listen wants HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def cmd_broker(args: argparse.Namespace) -> int:
    import asyncio
    import logging
    import signal

    from .broker.broker import Broker
    from .broker.broker_config import BrokerConfigError
    from .broker.connection_quotas import raise_open_files_limit
    from .broker.server import freeze_startup_objects, keep_frame_memory
    from .security_cli import broker_properties

    logging.basicConfig(level=getattr(logging, args.log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    raise_open_files_limit()  # one descriptor per connection
    keep_frame_memory()  # a freed request's memory serves the next one
    host, port = _listen_address(args.listen or "127.0.0.1:9092")
    try:
        config = {**broker_properties(args), **_config_pairs(args.config)}
        broker = Broker(args.data_dir, host=host, port=port, config=config,
                        listen_given=args.listen is not None)
    except BrokerConfigError as exc:
        print(f"kip broker: {exc}", file=sys.stderr)
        return 2

    async def serve() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        bound_host, bound_port = await broker.start()
        freeze_startup_objects()  # full collections skip what the started broker holds
        print(f"listening on {bound_host}:{bound_port}", flush=True)
        for server in broker.servers:
            print(f"listener {server.spec.protocol}://{server.host}:{server.port}", flush=True)
        try:
            await stop.wait()
        finally:
            logging.getLogger("kipproducer.broker").info("shutting down")
            await broker.stop()

    from .broker.security.errors import StoreError
    from .broker.storage.errors import StorageError

    try:
        asyncio.run(serve())
    except StoreError as exc:  # a corrupt users.json / acls.json in the data dir
        print(f"kip broker: {exc}; fix or remove the file (see docs/security.md)",
              file=sys.stderr)
        return 2
    except StorageError as exc:  # a damaged producer-ids.json, a data dir in use
        print(f"kip broker: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. the port is taken, the data dir is not writable
        print(f"kip broker: {exc}", file=sys.stderr)
        return 2
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kipproducer")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kip", description="kipproducer command line")
    parser.add_argument("--version", action="version", version=f"kip {_version()}",
                        help="print the installed kipproducer's version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="copy a compacted topic between two embedded brokers "
                                       "with its offsets kept (KIP-391) and compare them")
    demo.add_argument("--records", type=int, default=200_000,
                      help="records written to the source topic before compaction "
                           "(default 200000; at least 1000)")
    demo.add_argument("--no-spark", action="store_true",
                      help="skip the Spark step (run when pyspark and a Java are installed)")
    demo.add_argument("--target-mode", choices=list(TARGET_MODES), default="native",
                      help="native (default): the target is a kip broker with the KIP-WIRE "
                           "extension; emulated: the target has it switched off, as a stock "
                           "Kafka, and the copy keeps the offsets with Kafka's transactions "
                           "(docs/stock-clusters.md)")
    demo.set_defaults(func=cmd_demo)

    broker = sub.add_parser("broker", help="run the reference Kafka broker in the foreground")
    broker.add_argument("--listen", default=None, metavar="HOST:PORT",
                        help="address to listen on (default 127.0.0.1:9092 unless listeners= is "
                             "given; port 0: a free port, printed on the first "
                             "stdout line as 'listening on HOST:PORT')")
    broker.add_argument("--data-dir", required=True, help="where logs and metadata live")
    broker.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker property with Kafka's name, e.g. num.partitions=3 or "
                             "log.flush.interval.messages=1 (repeatable)")
    broker.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"],
                        help="what the broker logs on stderr (default info)")
    security_cli.add_broker_options(broker)
    broker.set_defaults(func=cmd_broker)
    security_cli.add_parsers(sub)  # kip users, kip acls
    transactions_cli.add_parser(sub)  # kip transactions
    groups_cli.add_parser(sub)  # kip groups
    mirror_cli.add_parser(sub)  # kip mirror
    configs_cli.add_parser(sub)  # kip configs
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
