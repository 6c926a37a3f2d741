"""Side-by-side over TLS (issue 29): confluent-kafka's produce() loop and produce_batch against
kipproducer's produce_batch and produce_arrays, each over plaintext and over TLS to the same
`kip broker` (one PLAINTEXT and one SSL listener), in one run.

The certificates are made for the run with trustme (a CA and the broker's certificate for
127.0.0.1; the clients check the broker's certificate against the CA). Every contender runs
over both listeners, with a delivery callback per record (produce_arrays: per batch) and
without any, in every round, interleaved, each in its own process to a fresh topic, through
bench/side_by_side_producer.py's run (same records, settings and checks).

The lanes are bound by the CPU of the machine's two cores, which client and broker share, so
the table also gives the broker's CPU seconds per 1M records over each transport (read from
/proc around each run: the run's connection set-up, topic creation and deletion included), and
the cipher suite the broker negotiates with a default OpenSSL client.

``--broker kafka1`` / ``kafka3`` runs the same against Apache Kafka with 1 or 3 KRaft nodes
(an SSL listener on each, with a PEM keystore made for the run), with Kafka's own Java producer
as one more lane (issue 43; bench/side_by_side_producer.py's ``java producer``).

    python bench/side_by_side_tls.py [--records N] [--repeat R] [--chunk N]
        [--broker kip|kafka1|kafka3] [--write bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import socket
import ssl
import statistics
import sys
import time
from pathlib import Path

from bench_support import (
    BROKERS,
    brokers_cpu,
    load_average,
    start_broker,
    versions,
)
from side_by_side_producer import (
    CONTENDERS,
    JAVA,
    KEY_SIZE,
    VALUE_SIZE,
    mode_words,
    run_child,
)

HEADING = "## Producer lanes over TLS (issue 29)"
TRANSPORTS = ["plaintext", "TLS"]
MODES = [True, False]  # with per-record callbacks, without


def negotiated_suite(address: str, ca_pem: Path) -> str:
    """The TLS version and cipher suite the broker settles on with Python's default client
    context (OpenSSL's default preferences, as librdkafka's)."""
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=str(ca_pem))
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname=host) as tls:
            name, version, bits = tls.cipher()  # type: ignore[misc]
    return f"{version} {name} ({bits}-bit)"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=10_000,
                    help="records per produce_batch / produce_arrays call (default 10000)")
    ap.add_argument("--broker", choices=list(BROKERS), default="kip",
                    help="kip broker (default), or Apache Kafka with 1 or 3 KRaft nodes "
                         "(kafka1, kafka3; then the Java producer is a lane too)")
    ap.add_argument("--write", metavar="PATH")
    args = ap.parse_args(argv)
    n = args.records
    on_kafka = BROKERS[args.broker] > 0
    contenders = CONTENDERS + ([JAVA] if on_kafka else [])

    load0 = load_average()
    broker = start_broker(args.broker, "kip-bench-tls-", tls=True)
    listeners, ca_pem, data_where = broker.listeners, Path(broker.ca_pem), broker.data_where
    plain = listeners["PLAINTEXT"]
    suite = negotiated_suite(listeners["SSL"].split(",")[0], ca_pem)
    tls_config = {"security.protocol": "SSL", "ssl.ca.location": str(ca_pem)}
    jobs = [(transport, name, mode) for transport in TRANSPORTS for name in contenders
            for mode in MODES]
    results: dict[tuple[str, str, bool], list[dict]] = {job: [] for job in jobs}
    t_run = time.perf_counter()
    try:
        for rnd in range(args.repeat):
            for number, (transport, name, mode) in enumerate(jobs):  # interleaved
                tls = transport == "TLS"
                broker_cpu0 = brokers_cpu(broker.pids)
                result = run_child(name, plain, f"tls-{number}-{rnd}", n,
                                   bootstrap=listeners["SSL"] if tls else plain,
                                   callbacks=mode, chunk=args.chunk,
                                   client_config=tls_config if tls else None,
                                   broker_pids=broker.pids, replication=broker.replication)
                result["broker_cpu"] = brokers_cpu(broker.pids) - broker_cpu0
                results[(transport, name, mode)].append(result)
                print(f"{transport:9s} {name:24s} {'cb' if mode else 'no cb':5s} "
                      f"{n / result['seconds'] / 1e6:6.2f} M rec/s cpu {result['cpu']:.2f} s "
                      f"broker cpu {result['broker_cpu']:.2f} s", file=sys.stderr)
    finally:
        broker.stop()
    took = time.perf_counter() - t_run
    load1 = load_average()

    def rate(transport: str, name: str, mode: bool) -> float:
        return n / statistics.median(r["seconds"] for r in results[(transport, name, mode)])

    def per_round(transport: str, name: str, mode: bool, other: str,
                  other_mode: bool | None = None) -> list[float]:
        other_runs = results[(transport, other, mode if other_mode is None else other_mode)]
        return [o["seconds"] / r["seconds"] for r, o in zip(
            results[(transport, name, mode)], other_runs, strict=True)]

    def cpu_costs(transport: str, name: str, mode: bool) -> tuple[float, float, float]:
        """Over the timed part: median client and broker CPU seconds per 1M records, and the
        cores both kept busy."""
        runs = results[(transport, name, mode)]
        return (statistics.median(r["cpu"] for r in runs) * 1e6 / n,
                statistics.median(r["timed_broker_cpu"] for r in runs) * 1e6 / n,
                statistics.median((r["cpu"] + r["timed_broker_cpu"]) / r["seconds"]
                                  for r in runs))

    from results_file import machine

    nodes = BROKERS[args.broker]
    heading = HEADING if not on_kafka else (
        f"## Producer lanes over TLS on Apache Kafka, {nodes} node{'s' if nodes > 1 else ''} "
        "(issue 43)")
    broker_flag = "" if args.broker == "kip" else f" --broker {args.broker}"
    broker_words = (
        "one `kip broker` with a PLAINTEXT listener and an SSL listener "
        "(`listeners=SSL://127.0.0.1:0`, a PEM keystore made for the run with trustme)"
        if not on_kafka else
        f"{broker.words}, each node with a PLAINTEXT and an SSL listener (PEM keystore and "
        "truststore made for the run with trustme)")
    lines = [
        heading, "",
        f"Command: `python bench/side_by_side_tls.py --records {n} --repeat {args.repeat} "
        f"--chunk {args.chunk}{broker_flag}` (median of {args.repeat} rounds, every run in its "
        f"own process; whole run {took:.0f} s).",
        f"Machine: {machine()}; client and broker share it, on loopback; the broker's "
        f"data dir {data_where}. /proc/loadavg before: {load0}; after: {load1}.",
        f"Versions: {versions()}.",
        f"Broker: {broker_words}; the TLS clients set security.protocol=SSL and "
        "ssl.ca.location (the broker's certificate "
        f"is verified). Negotiated: {suite}, with Python's default client context.",
        f"Workload: {n:,} records, {KEY_SIZE}-byte keys, {VALUE_SIZE}-byte values "
        f"(produce_batch's dicts also carry one header and partition=0), {args.chunk:,} records "
        "per produce_batch / produce_arrays call, acks=all, enable.idempotence=true, "
        "linger.ms=5, 1 partition, each run to its own fresh topic. Every contender runs over "
        "both listeners, with a delivery callback per record (produce_arrays: one report per "
        "batch) and without any (produce_batch's errors read from _error when it queues fewer "
        "than given; the topic's high watermark checked after the run), all interleaved in "
        "every round. Timed from the first call to flush() returning; CPU is the contender's "
        "process. The table's broker CPU spans the whole contender process (its connections, "
        "TLS handshakes and warm-up record too); the CPU lines under it count the timed part "
        "alone, on both sides."
        + ("" if JAVA not in contenders else
           " The Java producer: Kafka's own KafkaProducer with the same records, keys and "
           "settings (bench/side_by_side_producer.py's java producer; TLS with "
           "ssl.truststore.type=PEM and the run's CA; its JIT warmed before the clock)."),
        "",
        "| lane | callbacks | plaintext records/s | TLS records/s | TLS / plaintext | plaintext "
        "CPU s per 1M records | TLS CPU s per 1M records | broker CPU s per 1M records, "
        "plaintext | broker, TLS |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name in contenders:
        for mode in MODES:
            p_rate, t_rate = rate("plaintext", name, mode), rate("TLS", name, mode)
            p_cpu, cpu = (statistics.median(r["cpu"] for r in results[(transport, name, mode)])
                          * 1e6 / n for transport in TRANSPORTS)
            p_broker, t_broker = (
                statistics.median(r["broker_cpu"] for r in results[(transport, name, mode)])
                * 1e6 / n for transport in TRANSPORTS)
            lines.append(f"| {name} | {'yes' if mode else 'no'} | {p_rate / 1e6:.2f} M | "
                         f"{t_rate / 1e6:.2f} M | {t_rate / p_rate:.2f} | {p_cpu:.2f} | "
                         f"{cpu:.2f} | "
                         f"{p_broker:.2f} | {t_broker:.2f} |")
    lines.append("")
    confluent = [name for name in CONTENDERS if name.startswith("confluent")]
    for transport in TRANSPORTS:
        for mode in MODES:
            ratios = per_round(transport, "kip produce_batch", mode, "confluent produce_batch")
            median = statistics.median(ratios)
            lines.append(
                f"- {transport}, {mode_words(mode)}: kip produce_batch / confluent "
                "produce_batch per round " + ", ".join(f"{r:.2f}x" for r in ratios)
                + f"; median {median:.2f}x (target 2x: {'met' if median >= 2 else 'NOT met'}).")
            if JAVA in contenders:
                for name, target in (("kip produce_arrays", 3.0), ("kip produce_batch", 1.5)):
                    ratios = per_round(transport, name, mode, JAVA)
                    median = statistics.median(ratios)
                    lines.append(
                        f"- {transport}, {mode_words(mode)}: {name} / java producer per round "
                        + ", ".join(f"{r:.2f}x" for r in ratios) + f"; median {median:.2f}x "
                        f"(issue 43's target {target}x: "
                        f"{'met' if median >= target else 'NOT met'}).")
        # produce_arrays against confluent's best lane of the same round, whichever lane and
        # way of calling it was (the fastest confluent run of the round).
        best = []
        for rnd in range(args.repeat):
            best.append(min(results[(transport, name, mode)][rnd]["seconds"]
                            for name in confluent for mode in MODES))
        for mode in MODES:
            ratios = [b / r["seconds"] for r, b in zip(
                results[(transport, "kip produce_arrays", mode)], best, strict=True)]
            median = statistics.median(ratios)
            way = "with a report per batch" if mode else "without callbacks"
            lines.append(
                f"- {transport}, kip produce_arrays {way} / confluent's best lane "
                "of the round (any lane, with or without callbacks): per round "
                + ", ".join(f"{r:.2f}x" for r in ratios) + f"; median {median:.2f}x (target "
                f"4x: {'met' if median >= 4 else 'NOT met'}).")
        # Client and broker share the machine's cores: what a lane's records cost on both
        # sides, and how much of the machine the lane kept busy, say whether its rate is
        # bound by CPU or by time the cores sat idle. (A broker on its own hardware leaves
        # only the client's share on the client's machine.)
        fastest = max(((name, mode) for name in confluent for mode in MODES),
                      key=lambda lane: rate(transport, *lane))
        c_client, c_broker, c_busy = cpu_costs(transport, *fastest)
        for mode in MODES:
            k_client, k_broker, k_busy = cpu_costs(transport, "kip produce_arrays", mode)
            way = "with a report per batch" if mode else "without callbacks"
            lines.append(
                f"- {transport}, CPU s per 1M records, kip produce_arrays {way} against "
                f"confluent's fastest lane ({fastest[0]} {mode_words(fastest[1])}): client "
                f"{k_client:.2f} against {c_client:.2f} ({c_client / k_client:.1f}x); client and "
                f"broker {k_client + k_broker:.2f} against {c_client + c_broker:.2f} "
                f"({(c_client + c_broker) / (k_client + k_broker):.1f}x); cores kept busy "
                f"{k_busy:.2f} and {c_busy:.2f} of {os.cpu_count()}.")
    section = "\n".join(lines) + "\n"
    print(section)
    if args.write:
        from results_file import replace_section

        replace_section(args.write, heading, section)


if __name__ == "__main__":
    main()
