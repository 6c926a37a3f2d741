// The Java producer's lane of bench/side_by_side_producer.py: Kafka's own KafkaProducer sends
// the same records as the Python lanes (keys "k" + 11 digits, one random value of the given
// size for every record), with the settings of the properties file the bench writes.
//
//   java -cp <kafka lib>/*:<classes> BenchProducer <producer.properties> <topic> <warm-up topic>
//        <records> <warm-up records> <value size> <on|off> <broker pids, comma-separated, or ->
//
// Kafka's ProducerPerformance tool sends no keys, so the bench has this program instead. The
// warm-up records go to the warm-up topic first (connections up, as in every lane, and the
// JIT's compiled send path, which a long-lived Java producer has), then the clock runs from the first send() to flush() returning. With "on" every record has a callback that
// counts deliveries and failures; with "off" send() has none (the bench checks the topic's
// high watermark). Prints one JSON line: seconds, the process's CPU seconds over the timed
// part (all threads), its peak RSS, the brokers' CPU seconds over the same span (from each
// broker thread's /proc schedstat, as bench_support.broker_cpu), and the counts.
import java.io.FileReader;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class BenchProducer {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileReader reader = new FileReader(args[0], StandardCharsets.UTF_8)) {
            props.load(reader);
        }
        props.put("key.serializer", ByteArraySerializer.class.getName());
        props.put("value.serializer", ByteArraySerializer.class.getName());
        String topic = args[1];
        String warm = args[2];
        int n = Integer.parseInt(args[3]);
        int warmUp = Integer.parseInt(args[4]);
        byte[] value = new byte[Integer.parseInt(args[5])];
        new Random().nextBytes(value);
        boolean callbacks = args[6].equals("on");
        String[] pids = args[7].equals("-") ? new String[0] : args[7].split(",");

        byte[][] keys = new byte[n][];
        for (int i = 0; i < n; i++) {
            keys[i] = String.format("k%011d", i).getBytes(StandardCharsets.US_ASCII);
        }
        AtomicLong delivered = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        Callback count = (metadata, error) -> {
            if (error == null) {
                delivered.incrementAndGet();
            } else if (failed.getAndIncrement() == 0) {
                System.err.println("first failure: " + error);
            }
        };
        com.sun.management.OperatingSystemMXBean os =
            (com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            producer.partitionsFor(topic);
            for (int i = 0; i < warmUp; i++) {
                producer.send(new ProducerRecord<>(warm, keys[i % n], value), count);
            }
            producer.flush();
            if (failed.get() != 0 || delivered.get() != warmUp) {
                System.err.printf("warm-up: delivered %d, failed %d of %d%n", delivered.get(),
                                  failed.get(), warmUp);
                System.exit(3);
            }
            delivered.set(0);
            double broker0 = brokerCpu(pids);
            long cpu0 = os.getProcessCpuTime();
            long t0 = System.nanoTime();
            for (int i = 0; i < n; i++) {
                ProducerRecord<byte[], byte[]> record = new ProducerRecord<>(topic, keys[i], value);
                if (callbacks) {
                    producer.send(record, count);
                } else {
                    producer.send(record);
                }
            }
            producer.flush();
            double seconds = (System.nanoTime() - t0) / 1e9;
            double cpu = (os.getProcessCpuTime() - cpu0) / 1e9;
            double broker = brokerCpu(pids) - broker0;
            if (callbacks && (failed.get() != 0 || delivered.get() != n)) {
                System.err.printf("delivered %d, failed %d of %d%n", delivered.get(),
                                  failed.get(), n);
                System.exit(3);
            }
            System.out.printf("{\"seconds\": %.6f, \"cpu\": %.6f, \"rss_mib\": %.1f, "
                              + "\"timed_broker_cpu\": %s, \"delivered\": %d}%n", seconds, cpu,
                              peakRssMib(), pids.length == 0 ? "null" : String.format("%.6f", broker),
                              callbacks ? delivered.get() : n);
        }
    }

    // CPU seconds of the broker processes so far, all their threads (schedstat, nanoseconds).
    static double brokerCpu(String[] pids) throws IOException {
        long total = 0;
        for (String pid : pids) {
            try (DirectoryStream<Path> tasks = Files.newDirectoryStream(Paths.get("/proc", pid, "task"))) {
                for (Path task : tasks) {
                    try {
                        String stat = Files.readString(task.resolve("schedstat"));
                        total += Long.parseLong(stat.trim().split(" ")[0]);
                    } catch (IOException gone) {
                        // a thread that ended between the listing and the read
                    }
                }
            }
        }
        return total / 1e9;
    }

    static double peakRssMib() throws IOException {
        for (String line : Files.readAllLines(Paths.get("/proc/self/status"))) {
            if (line.startsWith("VmHWM:")) {
                return Long.parseLong(line.replaceAll("[^0-9]", "")) / 1024.0;
            }
        }
        return 0;
    }
}
