package chaoslab.spark;

import com.mongodb.ConnectionString;
import com.mongodb.MongoClientSettings;
import com.mongodb.MongoDriverInformation;
import com.mongodb.client.MongoClient;
import com.mongodb.client.MongoClients;
import com.mongodb.spark.connector.Versions;
import com.mongodb.spark.sql.connector.config.MongoConfig;
import com.mongodb.spark.sql.connector.connection.MongoClientFactory;
import java.io.File;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;

/**
 * MongoDB's Spark connector's client, as its default factory makes it (the connection string,
 * the connector's driver information), with the lab's {@link Watch} on its commands: what the
 * driver saw goes into the run's history, and the crash points inside a write task act there.
 * Named by the write option {@code mongoClientFactory}; the lab's own options ({@code
 * chaoslab.*}) are options the connector ignores.
 */
public final class WatchedClientFactory implements MongoClientFactory {
  private final ConnectionString connection;
  private final Map<String, String> lab = new TreeMap<>();

  public WatchedClientFactory(MongoConfig config) {
    this.connection = config.getConnectionString();
    for (Map.Entry<String, String> option : config.getOptions().entrySet()) {
      if (option.getKey().toLowerCase().startsWith("chaoslab.")) {
        lab.put(option.getKey().toLowerCase(), option.getValue());
      }
    }
  }

  private String option(String key) {
    return lab.getOrDefault(key.toLowerCase(), "");
  }

  @Override
  public MongoClient create() {
    Watch watch =
        new Watch(
            new File(option("chaoslab.history")),
            option("chaoslab.variant"),
            new File(option("chaoslab.crashes")),
            option("chaoslab.driverGroup").isEmpty()
                ? 0
                : Long.parseLong(option("chaoslab.driverGroup")));
    MongoClientSettings settings =
        MongoClientSettings.builder()
            .applyConnectionString(connection)
            .addCommandListener(watch)
            .applyToServerSettings(server -> server.addServerMonitorListener(watch))
            .build();
    MongoDriverInformation driver =
        MongoDriverInformation.builder()
            .driverName(Versions.NAME + "|sink")
            .driverVersion(Versions.VERSION)
            .driverPlatform(
                "Scala/"
                    + scala.util.Properties.versionNumberString()
                    + "/Spark/"
                    + org.apache.spark.package$.MODULE$.SPARK_VERSION())
            .build();
    return MongoClients.create(settings, driver);
  }

  // The connector shares a client among the tasks whose factories are equal.
  @Override
  public boolean equals(Object o) {
    return o instanceof WatchedClientFactory that
        && connection.equals(that.connection)
        && lab.equals(that.lab);
  }

  @Override
  public int hashCode() {
    return Objects.hash(connection, lab);
  }
}
