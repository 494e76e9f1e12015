package chaoslab.examples;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Date;

import org.bson.Document;

/**
 * Parsing a Kafka record's value into the document the listener lands in MongoDB.
 *
 * <p>The value is a Debezium-style change event:
 * {@code {"event_id": "e-..", "order_id": 17, "version": 3,
 * "payload": {"op": "u", "before": {..}, "after": {..}, "source": {"txId": "tx-..", ..}}}}.
 * A value that is not that (not UTF-8, not JSON, or a field missing or of the wrong type) is
 * poison: {@link #parse} throws {@link Poison} and the listener dead-letters it. The fields
 * required are the ones the lab's own Python listener requires (harness/workload/events.py).
 */
final class Records {

    private Records() {
    }

    /** A record no consumer can parse; the message says why. */
    static final class Poison extends Exception {
        Poison(String reason) {
            super(reason, null, false, false); // no stack trace: it is a verdict, not a bug
        }
    }

    /** What the listener keeps of a parsed change event. */
    record Event(String eventId, long orderId, long version, String op, String txId) {

        /**
         * The document for the {@code landed} collection, without {@code _id}: which {@code _id}
         * it gets is the mode's choice (see Listener).
         */
        Document landed(int partition, long offset, int instance, Date receivedAt) {
            return new Document("event_id", eventId)
                    .append("order_id", orderId)
                    .append("version", version)
                    .append("op", op)
                    .append("tx_id", txId)
                    .append("partition", partition)
                    .append("offset", offset)
                    .append("instance", instance)
                    .append("received_at", receivedAt);
        }
    }

    static Event parse(byte[] value) throws Poison {
        if (value == null) {
            throw new Poison("empty value");
        }
        String text;
        try {
            // Strict: a value that is not UTF-8 is poison, not a string with replacement characters.
            text = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(value))
                    .toString();
        } catch (CharacterCodingException e) {
            throw new Poison("value is not UTF-8");
        }
        Document doc;
        try {
            // The BSON library's JSON reader (already on the class path with the driver): a JSON
            // object parses; a truncated document, an array or a bare value throws.
            doc = Document.parse(text);
        } catch (RuntimeException e) {
            throw new Poison("malformed JSON: " + e.getMessage());
        }
        Document payload = field(doc, "payload", Document.class);
        Document source = field(payload, "source", Document.class);
        return new Event(
                field(doc, "event_id", String.class),
                integer(doc, "order_id"),
                integer(doc, "version"),
                field(payload, "op", String.class),
                field(source, "txId", String.class));
    }

    private static <T> T field(Document doc, String name, Class<T> type) throws Poison {
        Object v = doc.get(name);
        if (!type.isInstance(v)) {
            throw new Poison("missing or invalid field: " + name);
        }
        return type.cast(v);
    }

    private static long integer(Document doc, String name) throws Poison {
        Object v = doc.get(name);
        // JSON numbers without a fraction come back as Integer or Long.
        if (v instanceof Integer || v instanceof Long) {
            return ((Number) v).longValue();
        }
        throw new Poison("missing or invalid field: " + name);
    }
}
