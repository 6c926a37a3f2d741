// Reads whole topics with Kafka's own Java consumer, for the tests that check what a topic
// holds with both librdkafka and the Java client (tests/apache_kafka/kafka_support.py).
//
//   java -cp <kafka lib>/*:<classes> ReadTopics <bootstrap> <isolation.level> <topic>...
//
// Prints one line per record: topic, partition, offset, key, value, tab-separated, with keys
// and values as hex ("-" for null), after reading each partition up to its end offset as the
// consumer sees it at that isolation level (the last stable offset for read_committed), and
// exits. A partition whose end is not reached in 120 s is an error (exit code 2).
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ReadTopics {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("isolation.level", args[1]);
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        HexFormat hex = HexFormat.of();
        StringBuilder out = new StringBuilder();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> parts = new ArrayList<>();
            for (int i = 2; i < args.length; i++) {
                for (PartitionInfo p : consumer.partitionsFor(args[i], Duration.ofSeconds(30))) {
                    parts.add(new TopicPartition(p.topic(), p.partition()));
                }
            }
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            Map<TopicPartition, Long> ends = consumer.endOffsets(parts, Duration.ofSeconds(30));
            long deadline = System.currentTimeMillis() + 120_000;
            while (true) {
                boolean done = true;
                for (TopicPartition tp : parts) {
                    if (consumer.position(tp, Duration.ofSeconds(30)) < ends.get(tp)) {
                        done = false;
                    }
                }
                if (done) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    System.out.print(out);
                    System.err.println("ReadTopics: end offsets " + ends + " not reached in 120 s");
                    System.exit(2);
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    out.append(r.topic()).append('\t').append(r.partition()).append('\t')
                       .append(r.offset()).append('\t')
                       .append(r.key() == null ? "-" : hex.formatHex(r.key())).append('\t')
                       .append(r.value() == null ? "-" : hex.formatHex(r.value())).append('\n');
                }
            }
        }
        System.out.print(out);
    }
}
