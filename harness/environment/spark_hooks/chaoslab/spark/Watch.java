package chaoslab.spark;

import com.mongodb.MongoCommandException;
import com.mongodb.MongoInterruptedException;
import com.mongodb.event.CommandFailedEvent;
import com.mongodb.event.CommandListener;
import com.mongodb.event.CommandSucceededEvent;
import com.mongodb.event.ServerHeartbeatFailedEvent;
import com.mongodb.event.ServerHeartbeatSucceededEvent;
import com.mongodb.event.ServerMonitorListener;
import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.util.Collections;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.TaskContext;

/**
 * What the connector's MongoDB driver does with a lane's commands, as the lab's pymongo lanes
 * record it (harness.pipeline.spark.driver_watch): a command that failed, an operation the driver
 * retried and got answered, the first failed heartbeat of an outage. And the mid_write crash
 * points: a write task that has had {@code after_docs} documents acknowledged strikes as the
 * driver armed it ({@code crashes/armed-mid_write}, rewritten by the lab's Spark driver at every
 * batch), claiming the firing as the lab's Python crash points do (harness.pipeline.crash).
 */
final class Watch implements CommandListener, ServerMonitorListener {
  static final String ARMED = "armed-mid_write";
  private static final String EXECUTOR_MAIN =
      "org.apache.spark.executor.CoarseGrainedExecutorBackend";
  private static final int REMEMBERED = 1000;

  private final File history;
  private final String variant;
  private final File crashes;
  private final long driverGroup;
  private final Map<Long, String> failed = Collections.synchronizedMap(bounded());
  private final Map<Long, Integer> written = Collections.synchronizedMap(bounded());
  private final Set<String> unreachable = Collections.synchronizedSet(new HashSet<>());

  Watch(File history, String variant, File crashes, long driverGroup) {
    this.history = history;
    this.variant = variant;
    this.crashes = crashes;
    this.driverGroup = driverGroup;
  }

  private static <V> Map<Long, V> bounded() {
    return new LinkedHashMap<>() {
      @Override
      protected boolean removeEldestEntry(Map.Entry<Long, V> eldest) {
        return size() > REMEMBERED;
      }
    };
  }

  private void record(String kind, Map<String, Object> fields) {
    Lab.record(history, variant, kind, fields);
  }

  @Override
  public void commandSucceeded(CommandSucceededEvent event) {
    String command = event.getCommandName();
    if (failed.remove(event.getOperationId()) != null) {
      record("mongo-retried", Map.of("detail", command + " answered on a retry"));
    }
    if (command.equals("insert") || command.equals("update") || command.equals("delete")) {
      reachedMidWrite(event.getResponse().getNumber("n", new org.bson.BsonInt32(0)).intValue());
    }
  }

  @Override
  public void commandFailed(CommandFailedEvent event) {
    Throwable failure = event.getThrowable();
    String reason =
        failure instanceof MongoCommandException e
            ? e.getErrorMessage() + " (code " + e.getErrorCode() + ")"
            : String.valueOf(failure.getMessage());
    record("mongo-error", Map.of("detail", event.getCommandName() + ": " + reason));
    failed.put(event.getOperationId(), event.getCommandName());
  }

  // One event per outage, not one per check: the monitor keeps checking a server that is away.
  @Override
  public void serverHeartbeatSucceeded(ServerHeartbeatSucceededEvent event) {
    unreachable.remove(event.getConnectionId().getServerId().getAddress().toString());
  }

  @Override
  public void serverHeartbeatFailed(ServerHeartbeatFailedEvent event) {
    if (event.getThrowable() instanceof MongoInterruptedException) {
      return; // the client is being closed (the connector closes one it has not used for 5 s)
    }
    if (unreachable.add(event.getConnectionId().getServerId().getAddress().toString())) {
      record("mongo-error", Map.of("detail", "heartbeat: " + event.getThrowable().getMessage()));
    }
  }

  /** A write command of a task was answered: {@code n} more of its documents are written. */
  private void reachedMidWrite(int n) {
    TaskContext task = TaskContext.get();
    if (task == null || crashes.getPath().isEmpty()) {
      return;
    }
    int total = written.merge(task.taskAttemptId(), n, Integer::sum);
    File armed = new File(crashes, ARMED);
    List<String> plans;
    try {
      plans = armed.isFile() ? Files.readAllLines(armed.toPath()) : List.of();
    } catch (IOException e) {
      return; // rewritten as it was read: the next write reads it again
    }
    for (String line : plans) {
      // index, nth, after_docs, strikes, pause_s ('' for a kill), batch, fault name
      String[] plan = line.split("\t", -1);
      if (plan.length != 7 || total < Integer.parseInt(plan[2])) {
        continue;
      }
      File mark = new File(crashes, "crash-" + plan[0] + "-mid_write.fired-" + plan[1]);
      try {
        if (!mark.createNewFile()) {
          continue; // another task fired it
        }
      } catch (IOException e) {
        continue;
      }
      strike(plan[3], plan[4], Long.parseLong(plan[5]), plan[6]);
    }
  }

  private void strike(String strikes, String pauseS, long batch, String fault) {
    Map<String, Object> at = Map.of("batch", batch, "detail", "mid_write", "fault", fault);
    if (!pauseS.isEmpty()) {
      record("paused", at);
      Lab.kill("STOP", -driverGroup);
      return;
    }
    if (strikes.equals("executor")) {
      loseExecutor(batch, fault);
    }
    record("crash", at);
    Lab.kill("KILL", -driverGroup);
  }

  /** SIGKILL this executor JVM and every process it started, as a lost worker leaves it. */
  private void loseExecutor(long batch, String fault) {
    ProcessHandle me = ProcessHandle.current();
    String command = me.info().commandLine().orElse("");
    if (!command.contains(EXECUTOR_MAIN)) {
      throw new IllegalStateException(
          "an executor-loss plan fired outside a standalone executor (PID " + me.pid() + ")");
    }
    String where = System.getenv().getOrDefault("CHAOSLAB_SERVER", "?");
    record(
        "executor-lost",
        Map.of(
            "batch", batch,
            "detail", "mid_write: executor PID " + me.pid() + " on " + where,
            "fault", fault));
    me.descendants().forEach(ProcessHandle::destroyForcibly);
    Lab.kill("KILL", me.pid());
    try {
      Thread.sleep(60_000); // not reached: SIGKILL
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
