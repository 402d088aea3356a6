// A producer written with the Java client (kafka-clients), for
// tests/integration/test_foreign_producers.py: records that did not come from
// aiokafka, so that the guard is shown to decide them as it decides aiokafka's.
//
// Compiled in the test run against the broker's own jars (no binary is kept):
//   javac -d <out> -cp '<libs>/*' ForeignProducer.java
//   java -cp '<out>:<libs>/*' ForeignProducer <bootstrap> <topic> <linger.ms> <codec>:<partition>:<file> ...
//
// Each job is one KafkaProducer with compression.type=<codec> (none, gzip,
// snappy, lz4, zstd) writing every line of <file> to <partition> of <topic>, in
// order. A line is "<key> <value> [<header-name>:<header-value> ...]", each
// part base64 (standard alphabet), "-" for a null key. linger.ms makes
// consecutive records share a batch. acks=all and idempotence are the client's
// defaults (Kafka 3.0+). For every record, in input order, it prints
// "<codec> <partition> <offset>" on stdout; any failure exits non-zero.

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class ForeignProducer {
    private ForeignProducer() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: ForeignProducer <bootstrap> <topic> <linger.ms> <codec>:<partition>:<file> ...");
            System.exit(2);
        }
        Base64.Decoder b64 = Base64.getDecoder();
        for (int j = 3; j < args.length; j++) {
            String[] job = args[j].split(":", 3);
            String codec = job[0];
            int partition = Integer.parseInt(job[1]);
            Properties props = new Properties();
            props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
            props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, codec);
            props.put(ProducerConfig.LINGER_MS_CONFIG, args[2]);
            props.put(ProducerConfig.ACKS_CONFIG, "all");
            props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
            props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
                for (String line : Files.readAllLines(Path.of(job[2]), StandardCharsets.US_ASCII)) {
                    if (line.isBlank()) {
                        continue;
                    }
                    String[] parts = line.trim().split(" ");
                    byte[] key = parts[0].equals("-") ? null : b64.decode(parts[0]);
                    byte[] value = b64.decode(parts[1]);
                    List<Header> headers = new ArrayList<>();
                    for (int h = 2; h < parts.length; h++) {
                        String[] kv = parts[h].split(":", 2);
                        headers.add(new RecordHeader(new String(b64.decode(kv[0]), StandardCharsets.UTF_8), b64.decode(kv[1])));
                    }
                    sent.add(producer.send(new ProducerRecord<>(args[1], partition, key, value, headers)));
                }
                producer.flush();
                for (Future<RecordMetadata> f : sent) {
                    RecordMetadata m = f.get();
                    System.out.println(codec + " " + m.partition() + " " + m.offset());
                }
            }
        }
    }
}
