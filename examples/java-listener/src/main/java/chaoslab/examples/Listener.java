package chaoslab.examples;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Date;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import com.mongodb.MongoException;
import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoClients;
import com.mongodb.client.MongoCollection;
import com.mongodb.client.model.BulkWriteOptions;
import com.mongodb.client.model.Filters;
import com.mongodb.client.model.InsertManyOptions;
import com.mongodb.client.model.ReplaceOneModel;
import com.mongodb.client.model.ReplaceOptions;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.bson.Document;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A Kafka -> MongoDB listener, run by chaoslab as a black-box "command consumer".
 *
 * <p>It works like a Spring Kafka batch listener with {@code AckMode.BATCH}: poll, write the
 * poll's records to MongoDB, then {@code commitSync()} the poll's offsets. The commit comes
 * <em>after</em> the write, so a commit that fails (the group coordinator moved during a broker
 * rolling restart: "The coordinator is not aware of this member", CommitFailedException) leaves
 * records written but not committed, and the group hands them out again after the rebalance.
 * That is Kafka's at-least-once; what the redelivery does to MongoDB depends on the mode:
 *
 * <ul>
 *   <li>{@code seed-002}: the post-mortem's listener. Every document gets a fresh ObjectId (the
 *       driver's default when a document has no {@code _id}) and is inserted, so a redelivered
 *       record becomes a second document: same event, different {@code _id}, nothing in
 *       MongoDB to object. Two redeliveries, three documents.</li>
 *   <li>{@code fixed}: the post-mortem's fix. {@code _id} is the producer-minted
 *       {@code event_id} and the write is {@code replaceOne({_id: event_id}, doc, upsert)}, so a
 *       redelivered record replaces its own document instead of adding a copy.</li>
 * </ul>
 *
 * <p>Configured by environment variables only (see {@link #ENV} and README.md; the optional
 * CHAOSLAB_CLIENT_ID overrides the default client.id).
 */
public final class Listener {

    private static final Logger log = LoggerFactory.getLogger(Listener.class);

    /** Every variable the lab sets; all are required. */
    static final List<String> ENV = List.of(
            "CHAOSLAB_KAFKA_BOOTSTRAP", "CHAOSLAB_TOPIC", "CHAOSLAB_GROUP_ID", "CHAOSLAB_MONGO_URI",
            "CHAOSLAB_DATABASE", "CHAOSLAB_INSTANCE", "CHAOSLAB_DLQ_TOPIC");

    static final String USAGE = "usage: java -jar java-listener.jar seed-002|fixed [KAFKA_SETTING=VALUE ...]"
            + "  (configured by the environment: " + String.join(", ", ENV) + ")";

    /** What the contract fixes: a setting given on the command line may not change these. */
    static final List<String> FIXED = List.of(
            ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, ConsumerConfig.GROUP_ID_CONFIG,
            ConsumerConfig.CLIENT_ID_CONFIG, ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG,
            ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG,
            ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG);

    private static final Duration POLL_TIMEOUT = Duration.ofMillis(500);
    private static final int WRITE_ATTEMPTS = 5;
    private static final long WRITE_BACKOFF_MS = 500; // times the attempt number
    private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(10);
    /** How long SIGTERM waits for the batch in hand, its commit and the closes. */
    private static final long SHUTDOWN_DEADLINE_MS = 30_000;

    enum Mode {
        SEED_002("seed-002"), FIXED("fixed");

        final String arg;

        Mode(String arg) {
            this.arg = arg;
        }

        static Mode of(String arg) {
            for (Mode m : values()) {
                if (m.arg.equals(arg)) {
                    return m;
                }
            }
            return null;
        }
    }

    /** A record that parsed, with where it came from. */
    private record Parsed(ConsumerRecord<String, byte[]> record, Records.Event event) {
    }

    private final Mode mode;
    private final int instance;
    private final String topic;
    private final String dlqTopic;
    private final KafkaConsumer<String, byte[]> consumer;
    private final KafkaProducer<String, byte[]> deadLetters;
    private final MongoClient mongo;
    private final MongoCollection<Document> landed;

    private volatile boolean running = true;
    private volatile int exitStatus = 1;
    private final CountDownLatch finished = new CountDownLatch(1);

    public static void main(String[] args) {
        Mode mode = args.length >= 1 ? Mode.of(args[0]) : null;
        if (mode == null) {
            System.err.println(USAGE);
            System.exit(2);
        }
        // The consumer settings a team runs with (session.timeout.ms=10000, as kafka-clients
        // before 3.0 defaulted to...), over the Java client's defaults.
        Properties settings = new Properties();
        for (String arg : List.of(args).subList(1, args.length)) {
            int eq = arg.indexOf('=');
            String key = eq > 0 ? arg.substring(0, eq) : "";
            if (key.isEmpty() || FIXED.contains(key)) {
                System.err.println((key.isEmpty() ? "not KEY=VALUE: " : "fixed by the lab: ") + arg);
                System.err.println(USAGE);
                System.exit(2);
            }
            settings.put(key, arg.substring(eq + 1));
        }
        Map<String, String> env = System.getenv();
        List<String> missing = ENV.stream().filter(n -> env.getOrDefault(n, "").isBlank()).toList();
        if (!missing.isEmpty()) {
            System.err.println("missing environment variables: " + String.join(", ", missing));
            System.exit(2);
        }
        int instance;
        try {
            instance = Integer.parseInt(env.get("CHAOSLAB_INSTANCE").trim());
        } catch (NumberFormatException e) {
            System.err.println("CHAOSLAB_INSTANCE is not an integer: " + env.get("CHAOSLAB_INSTANCE"));
            System.exit(2);
            return;
        }
        int status;
        try {
            status = new Listener(mode, env, instance, settings).run();
        } catch (RuntimeException e) { // a client that could not be built from the configuration
            log.error("could not start: {}: {}", e.getClass().getName(), e.getMessage(), e);
            status = 1;
        }
        // When SIGTERM started the shutdown, this blocks and the shutdown hook ends the JVM.
        System.exit(status);
    }

    Listener(Mode mode, Map<String, String> env, int instance, Properties settings) {
        this.mode = mode;
        this.instance = instance;
        this.topic = env.get("CHAOSLAB_TOPIC");
        this.dlqTopic = env.get("CHAOSLAB_DLQ_TOPIC");
        String bootstrap = env.get("CHAOSLAB_KAFKA_BOOTSTRAP");
        // The lab may also pass CHAOSLAB_CLIENT_ID: its fault proxy tells a consumer's connections
        // from its producer's by client.id, so a link fault reaches this process only under that id.
        String clientId = env.getOrDefault("CHAOSLAB_CLIENT_ID", "").isBlank()
                ? "chaoslab-java-listener-" + instance
                : env.get("CHAOSLAB_CLIENT_ID");

        // Only what the contract fixes; everything else is the Java client's default, because its
        // own behaviour while coordinators move is what the lab is here to see.
        Properties c = new Properties();
        c.putAll(settings);
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, env.get("CHAOSLAB_GROUP_ID"));
        c.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        // The value as bytes: a poison record goes to the dead-letter topic exactly as it came.
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());

        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.CLIENT_ID_CONFIG, clientId + "-dlq");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());

        // The URI as the lab passes it: its options (appName, directConnection, ...) apply.
        this.mongo = MongoClients.create(env.get("CHAOSLAB_MONGO_URI"));
        this.landed = mongo.getDatabase(env.get("CHAOSLAB_DATABASE")).getCollection("landed");
        this.deadLetters = new KafkaProducer<>(p);
        this.consumer = new KafkaConsumer<>(c);
        log.info("java listener {} (instance {}, client.id {}): group {}, topic {} -> {}.landed, dead letters to {}; settings {}",
                mode.arg, instance, clientId, env.get("CHAOSLAB_GROUP_ID"), topic,
                env.get("CHAOSLAB_DATABASE"), dlqTopic, settings);
    }

    /** Runs until SIGTERM (status 0) or a write that keeps failing (status 1). */
    int run() {
        Runtime.getRuntime().addShutdownHook(new Thread(this::onSigterm, "chaoslab-shutdown"));
        int status = 1;
        try {
            status = pollLoop();
        } catch (RuntimeException e) {
            log.error("listener failed: {}: {}", e.getClass().getName(), e.getMessage(), e);
        } finally {
            close();
            exitStatus = status;
            finished.countDown();
        }
        return status;
    }

    /**
     * SIGTERM (or any other JVM shutdown): stop polling, let the loop write and commit the batch
     * in hand, and wait for it, so that the JVM does not exit in the middle of a write.
     */
    private void onSigterm() {
        if (finished.getCount() > 0) {
            log.info("shutting down: finishing the batch in hand");
            running = false;
            try {
                consumer.wakeup(); // a poll in progress returns at once (WakeupException)
            } catch (RuntimeException e) {
                log.warn("wakeup: {}: {}", e.getClass().getName(), e.getMessage());
            }
        }
        try {
            if (!finished.await(SHUTDOWN_DEADLINE_MS, TimeUnit.MILLISECONDS)) {
                log.error("the listener did not stop within {} ms; exiting anyway", SHUTDOWN_DEADLINE_MS);
                Runtime.getRuntime().halt(1);
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        // A JVM ended by SIGTERM exits with 143; the loop's own status (0 after a clean stop) is
        // the one that tells the lab what happened. halt() skips nothing of ours: all is closed.
        System.err.flush();
        Runtime.getRuntime().halt(exitStatus);
    }

    private int pollLoop() {
        consumer.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                log.info("rebalance: partitions revoked {}", partitions);
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                log.info("rebalance: partitions assigned {}", partitions);
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> partitions) {
                log.info("rebalance: partitions lost (no longer in the group) {}", partitions);
            }
        });
        long batch = 0;
        while (running) {
            ConsumerRecords<String, byte[]> records;
            try {
                records = consumer.poll(POLL_TIMEOUT);
            } catch (WakeupException e) {
                break; // SIGTERM while polling: nothing in hand
            }
            if (records.isEmpty()) {
                continue;
            }
            batch++;
            if (!handle(batch, records)) {
                // Not committed: the records come again, to this instance when restarted or to another.
                return 1;
            }
            commit(batch, records.count());
        }
        log.info("stopped after {} batches", batch);
        return 0;
    }

    /** Dead-letters the poll's poison and writes the rest; false if either failed for good. */
    private boolean handle(long batch, ConsumerRecords<String, byte[]> records) {
        List<Parsed> parsed = new ArrayList<>(records.count());
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        for (ConsumerRecord<String, byte[]> r : records) {
            try {
                parsed.add(new Parsed(r, Records.parse(r.value())));
            } catch (Records.Poison poison) {
                sent.add(deadLetters.send(deadLetter(r, poison.getMessage())));
            }
        }
        // Committing past a poison record the dead-letter topic does not hold would lose it.
        for (Future<RecordMetadata> f : sent) {
            try {
                f.get();
            } catch (InterruptedException | ExecutionException e) {
                Throwable cause = e instanceof ExecutionException ? e.getCause() : e;
                log.error("batch {}: dead-lettering failed, exiting without committing: {}: {}",
                        batch, cause.getClass().getName(), cause.getMessage());
                return false;
            }
        }
        return parsed.isEmpty() || write(batch, parsed);
    }

    private ProducerRecord<String, byte[]> deadLetter(ConsumerRecord<String, byte[]> r, String reason) {
        RecordHeaders headers = new RecordHeaders();
        headers.add("error", reason.getBytes(StandardCharsets.UTF_8));
        headers.add("origin-partition", Integer.toString(r.partition()).getBytes(StandardCharsets.UTF_8));
        headers.add("origin-offset", Long.toString(r.offset()).getBytes(StandardCharsets.UTF_8));
        return new ProducerRecord<>(dlqTopic, null, r.key(), r.value(), headers);
    }

    /** Writes the poll's documents, retrying a few times; false if MongoDB kept refusing. */
    private boolean write(long batch, List<Parsed> parsed) {
        for (int attempt = 1; ; attempt++) {
            try {
                // The documents are built anew for every attempt, as Spring's retry would call the
                // listener again. In seed-002 that means fresh ObjectIds: if an attempt that
                // "failed" had in fact landed (a timeout after the server applied it), the retry
                // stores the records a second time too.
                Date receivedAt = new Date();
                if (mode == Mode.SEED_002) {
                    List<Document> docs = new ArrayList<>(parsed.size());
                    for (Parsed p : parsed) {
                        docs.add(p.event().landed(p.record().partition(), p.record().offset(), instance, receivedAt));
                    }
                    // No _id in the documents: the driver mints a new ObjectId for each, every
                    // time a record is delivered. This is seed 002's bug.
                    landed.insertMany(docs, new InsertManyOptions().ordered(true));
                } else {
                    List<ReplaceOneModel<Document>> ops = new ArrayList<>(parsed.size());
                    for (Parsed p : parsed) {
                        String id = p.event().eventId();
                        Document doc = new Document("_id", id);
                        doc.putAll(p.event().landed(p.record().partition(), p.record().offset(), instance, receivedAt));
                        // _id minted by the producer: a redelivery replaces its own document. Two
                        // instances upserting one new _id at once can race (E11000); the retry
                        // below then replaces.
                        ops.add(new ReplaceOneModel<>(Filters.eq("_id", id), doc, new ReplaceOptions().upsert(true)));
                    }
                    landed.bulkWrite(ops, new BulkWriteOptions().ordered(true));
                }
                return true;
            } catch (MongoException e) {
                log.warn("batch {}: write attempt {}/{} failed: {}: {}",
                        batch, attempt, WRITE_ATTEMPTS, e.getClass().getName(), e.getMessage());
                if (attempt >= WRITE_ATTEMPTS || !running) {
                    log.error("batch {}: giving up on the write, exiting without committing", batch);
                    return false;
                }
                try {
                    Thread.sleep(WRITE_BACKOFF_MS * attempt);
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    return false;
                }
            }
        }
    }

    /** Commits the offsets of everything the last poll returned (AckMode.BATCH). */
    private void commit(long batch, int count) {
        try {
            try {
                consumer.commitSync();
            } catch (WakeupException e) {
                // SIGTERM's wakeup landed on the commit instead of a poll. The batch is written,
                // so commit it anyway (a wakeup is delivered once; this call is not interrupted).
                consumer.commitSync();
            }
        } catch (KafkaException e) {
            // As Spring does: log and carry on. The records are in MongoDB but not committed, so the
            // group hands them out again after the rebalance - seed-002 stores them once more.
            log.error("batch {}: commit of {} records failed, they will be delivered again: {}: {}",
                    batch, count, e.getClass().getName(), e.getMessage());
        }
    }

    private void close() {
        try {
            // Without auto-commit, close commits nothing: it leaves the group.
            consumer.close(CloseOptions.timeout(CLOSE_TIMEOUT));
        } catch (RuntimeException e) {
            log.warn("closing the consumer: {}: {}", e.getClass().getName(), e.getMessage());
        }
        try {
            deadLetters.close(CLOSE_TIMEOUT);
        } catch (RuntimeException e) {
            log.warn("closing the dead-letter producer: {}: {}", e.getClass().getName(), e.getMessage());
        }
        try {
            mongo.close();
        } catch (RuntimeException e) {
            log.warn("closing the MongoDB client: {}: {}", e.getClass().getName(), e.getMessage());
        }
    }
}
