package chaoslab.spark;

import java.io.File;
import java.io.IOException;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.CancellableFSDataOutputStream;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;

/**
 * Spark's own checkpoint file manager (spark.sql.streaming.checkpointFileManagerClass), which
 * holds a query's offset-log and commit-log entries while the lab decides: the crash points of
 * a query whose writes happen inside Spark (MongoDB's connector sink, a user's own query).
 *
 * <p>Spark writes {@code offsets/N} before it runs batch N and {@code commits/N} after the
 * batch's write and the sink's commit: the last moment before Spark's checkpoint says the batch
 * is done. When the query's checkpoint holds a {@code chaoslab-hold} folder, each entry is
 * announced there ({@code commits-N.reached}) and written once the lab answers
 * ({@code commits-N.go}); the lab may instead kill the driver, the JVM with it. Other queries,
 * and every other file, are Spark's as usual.
 */
public final class HeldCheckpointFileManager extends FileContextBasedCheckpointFileManager {
  static final String HOLD = "chaoslab-hold";
  // The lab's driver answers within milliseconds; a driver that never does must not stop the
  // query for good.
  private static final long ANSWER_NS = TimeUnit.SECONDS.toNanos(120);

  public HeldCheckpointFileManager(Path path, Configuration hadoopConf) {
    super(path, hadoopConf);
  }

  @Override
  public CancellableFSDataOutputStream createAtomic(Path path, boolean overwriteIfPossible) {
    hold(path);
    return super.createAtomic(path, overwriteIfPossible);
  }

  private static void hold(Path path) {
    Path log = path.getParent();
    if (log == null || log.getParent() == null || !path.getName().matches("[0-9]+")) {
      return;
    }
    String kind = log.getName();
    if (!kind.equals("offsets") && !kind.equals("commits")) {
      return;
    }
    File folder = new File(log.getParent().toUri().getPath(), HOLD);
    if (!folder.isDirectory()) {
      return;
    }
    String entry = kind + "-" + path.getName();
    File reached = new File(folder, entry + ".reached");
    File go = new File(folder, entry + ".go");
    try {
      reached.createNewFile(); // the lab clears what a killed driver left before it starts
    } catch (IOException e) {
      return;
    }
    long deadline = System.nanoTime() + ANSWER_NS;
    while (!go.exists()) {
      if (System.nanoTime() > deadline) {
        System.err.println("chaoslab: no answer for " + entry + " in " + folder + "; going on");
        break;
      }
      try {
        Thread.sleep(2);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
    }
    go.delete();
    reached.delete();
  }
}
