package chaoslab.spark;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * What the lab's hooks inside Spark's JVMs share: a line of the run's history, written as the
 * lab's Python writers write theirs (harness.history.events: one JSON object per line, a file
 * per writing process, appended in one write so processes never interleave).
 */
final class Lab {
  private Lab() {}

  /** Appends one event (kind, plus string or number fields) to {@code history/spark-jvm-PID.jsonl}. */
  static void record(File history, String variant, String kind, Map<String, Object> fields) {
    StringBuilder line = new StringBuilder();
    line.append("{\"t\": ").append(System.currentTimeMillis() / 1000.0);
    line.append(", \"kind\": ").append(quote(kind));
    line.append(", \"source\": \"spark\"");
    if (!variant.isEmpty()) {
      line.append(", \"variant\": ").append(quote(variant));
    }
    for (Map.Entry<String, Object> field : fields.entrySet()) {
      Object value = field.getValue();
      line.append(", ").append(quote(field.getKey())).append(": ");
      line.append(value instanceof Number ? value.toString() : quote(String.valueOf(value)));
    }
    line.append("}\n");
    history.mkdirs();
    File file = new File(history, "spark-jvm-" + ProcessHandle.current().pid() + ".jsonl");
    try (FileOutputStream out = new FileOutputStream(file, true)) {
      out.write(line.toString().getBytes(StandardCharsets.UTF_8));
    } catch (IOException e) {
      System.err.println("chaoslab: could not write the history " + file + ": " + e);
    }
  }

  static String quote(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        default -> {
          if (c < 0x20) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
      }
    }
    return out.append('"').toString();
  }

  /** Sends {@code signal} to a process, or to a process group given as a negative id. */
  static void kill(String signal, long target) {
    try {
      new ProcessBuilder("kill", "-" + signal, "--", Long.toString(target))
          .inheritIO()
          .start()
          .waitFor();
    } catch (IOException e) {
      throw new IllegalStateException("chaoslab: could not send SIG" + signal, e);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
