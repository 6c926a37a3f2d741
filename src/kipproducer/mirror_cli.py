"""``kip mirror``: copy topics between two Kafka clusters (docs/mirror.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Any


def _properties(pairs: list[str] | None, flag: str) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"{flag} {pair!r}: expected NAME=VALUE")
        out[name.strip()] = value.strip()
    return out


def cmd_mirror(args: argparse.Namespace) -> int:
    from .mirror import Mirror, MirrorError

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.engine == "spark":  # a one-time backfill as one Spark job (docs/spark.md)
        try:
            from .spark.backfill import run_cli
        except ImportError as exc:  # the spark extra is not installed: the message says how
            if exc.name != "kipproducer.spark":
                raise
            print(f"kip mirror: --engine spark: {str(exc).removeprefix('kipproducer.spark: ')}",
                  file=sys.stderr)
            return 2

        try:
            configs = (_properties(args.source_config, "--source-config"),
                       _properties(args.target_config, "--target-config"))
        except ValueError as exc:
            print(f"kip mirror: {exc}", file=sys.stderr)
            return 2
        return run_cli(args, *configs)
    try:
        mirror = Mirror(
            args.source, args.target, args.topics, mode=args.mode, group=args.group,
            source_config=_properties(args.source_config, "--source-config"),
            target_config=_properties(args.target_config, "--target-config"),
            isolation=args.isolation, rename=args.rename, metrics_json=args.metrics_json,
            progress=not args.quiet, commit_interval_ms=args.commit_interval_ms,
            group_sync_interval_ms=args.group_sync_interval_ms,
            transactional_id=args.transactional_id, reader=args.reader)
    except (MirrorError, ValueError) as exc:
        print(f"kip mirror: {exc}", file=sys.stderr)
        return 2

    def stop(signum: int, frame: Any) -> None:
        mirror.stop()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        snapshot = mirror.run(once=args.once)
    except MirrorError as exc:
        print(f"kip mirror: {exc}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"kip mirror: {snapshot['records']:,} records copied in {snapshot['elapsed_s']:.1f} s "
          f"({snapshot['mode']}), lag {snapshot['lag']:,}", file=sys.stderr)
    return 0


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "mirror", help="copy topics between two Kafka clusters, offsets kept (preserve) or "
                       "exactly once (transactional)",
        description="Copies the source topics matching --topics to the target cluster. "
                    "--mode preserve writes every record at its source offset (KIP-391; the "
                    "target must be a kipproducer-aware broker) and resumes from the target's "
                    "log ends; --mode transactional commits records and source offsets in one "
                    "target transaction (KIP-656) and resumes from the target group --group. "
                    "SIGINT/SIGTERM stop it after the current batch or transaction.")
    parser.add_argument("--source", required=True, metavar="BOOTSTRAP",
                        help="bootstrap servers of the cluster copied from")
    parser.add_argument("--target", required=True, metavar="BOOTSTRAP",
                        help="bootstrap servers of the cluster copied to")
    parser.add_argument("--topics", required=True, metavar="REGEX",
                        help="source topics to copy (the whole name must match)")
    parser.add_argument("--mode", choices=("preserve", "transactional"), default="preserve",
                        help="preserve (default): every record at its source offset; "
                        "transactional: exactly once, source offsets kept in --group")
    parser.add_argument("--group", help="transactional mode: the target group that holds the "
                        "source offsets (required there)")
    parser.add_argument("--source-config", action="append", metavar="NAME=VALUE",
                        help="source client property (repeatable): security.protocol, sasl.*, "
                        "fetch.max.bytes, max.partition.fetch.bytes; any librdkafka consumer "
                        "property with --reader consumer")
    parser.add_argument("--reader", choices=("auto", "fetch", "consumer"), default="auto",
                        help="how the source is read: fetch (whole record batches, fast), "
                        "consumer (librdkafka, record by record), auto (default: fetch unless "
                        "the source config needs a SASL mechanism the fetch reader lacks, "
                        "such as GSSAPI; TLS sources are fetched)")
    parser.add_argument("--target-config", action="append", metavar="NAME=VALUE",
                        help="property for the target producer (repeatable)")
    parser.add_argument("--isolation", choices=("read_committed", "read_uncommitted"),
                        default="read_committed", help="how the source is read (default "
                        "read_committed: aborted records are not copied)")
    parser.add_argument("--rename", default="{topic}", help="target topic name, a format "
                        "string over the source name (default {topic}: the same name)")
    parser.add_argument("--metrics-json", metavar="FILE", help="write the metrics (per "
                        "partition: records, bytes, latency, lag) to FILE, rewritten in place")
    parser.add_argument("--once", action="store_true", help="stop when every partition has "
                        "caught up with the source (a one-time copy or backfill)")
    parser.add_argument("--commit-interval-ms", type=int, default=1000,
                        help="transactional mode: how often a transaction commits "
                        "(default 1000)")
    parser.add_argument("--group-sync-interval-ms", type=int, default=10_000,
                        help="preserve mode: how often consumer group offsets are copied "
                        "(default 10000, and once at the end)")
    parser.add_argument("--transactional-id", help="transactional mode: the target producer's "
                        "transactional.id (default kip-mirror-GROUP)")
    parser.add_argument("--engine", choices=("mirror", "spark"), default="mirror",
                        help="spark: a one-time offset-preserving backfill of every matching "
                        "topic as one Spark job (needs pyspark and a Java; preserve mode, "
                        "resumes from the target's log ends; docs/spark.md)")
    parser.add_argument("--spark-master", default="local[*]", help="--engine spark: the "
                        "Spark master (default local[*])")
    parser.add_argument("--quiet", action="store_true", help="no progress line")
    parser.add_argument("--verbose", action="store_true", help="log what the mirror does")
    parser.set_defaults(func=cmd_mirror)
