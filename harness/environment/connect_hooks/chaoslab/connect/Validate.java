package chaoslab.connect;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.common.utils.Time;
import org.apache.kafka.connect.connector.policy.AllConnectorClientConfigOverridePolicy;
import org.apache.kafka.connect.connector.policy.ConnectorClientConfigOverridePolicy;
import org.apache.kafka.connect.runtime.Worker;
import org.apache.kafka.connect.runtime.isolation.Plugins;
import org.apache.kafka.connect.runtime.rest.entities.ConfigInfo;
import org.apache.kafka.connect.runtime.rest.entities.ConfigInfos;
import org.apache.kafka.connect.runtime.standalone.StandaloneConfig;
import org.apache.kafka.connect.runtime.standalone.StandaloneHerder;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.storage.FileOffsetBackingStore;
import org.apache.kafka.connect.util.FutureCallback;

/**
 * Connect's own validation of connector configs, with no cluster: the herder a worker's REST API
 * answers {@code PUT /connector-plugins/CLASS/config/validate} with, on a worker that is never
 * started (no Kafka, no REST). Reads a JSON list of configs; writes, for each, a JSON list of
 * "key: message" problems (none: Connect takes it) - or the one message Connect refuses it with.
 *
 * <pre>java chaoslab.connect.Validate PLUGIN_PATH CONFIGS.json PLUGIN_DISCOVERY</pre>
 */
public final class Validate {
    private static final long TIMEOUT_S = 120;

    private Validate() {}

    public static void main(String[] args) throws Exception {
        ObjectMapper json = new ObjectMapper();
        List<Map<String, String>> configs =
                json.readValue(new File(args[1]), new TypeReference<List<Map<String, String>>>() {});
        File offsets = File.createTempFile("chaoslab-validate", ".offsets");
        offsets.deleteOnExit();
        Map<String, String> props = new HashMap<>();
        props.put("bootstrap.servers", "127.0.0.1:9");  // never asked: no worker is started
        props.put("offset.storage.file.filename", offsets.getPath());
        props.put("key.converter", "org.apache.kafka.connect.storage.StringConverter");
        props.put("value.converter", "org.apache.kafka.connect.json.JsonConverter");
        props.put("plugin.path", args[0]);
        props.put("plugin.discovery", args[2]);
        Plugins plugins = new Plugins(props);
        plugins.compareAndSwapWithDelegatingLoader();
        // A worker asks Kafka for its cluster's id when it is made; this one has no cluster.
        StandaloneConfig config = new StandaloneConfig(props) {
            @Override
            public String kafkaClusterId() {
                return "chaoslab";
            }
        };
        // Connect's default policy (connector.client.config.override.policy=All).
        ConnectorClientConfigOverridePolicy policy = new AllConnectorClientConfigOverridePolicy();
        Worker worker = new Worker("validate", Time.SYSTEM, plugins, config,
                new FileOffsetBackingStore(new JsonConverter()), policy);
        StandaloneHerder herder = new StandaloneHerder(worker, "chaoslab", policy);
        List<List<String>> found = new ArrayList<>();
        for (Map<String, String> connector : configs) {
            List<String> problems = new ArrayList<>();
            FutureCallback<ConfigInfos> done = new FutureCallback<>();
            try {
                herder.validateConnectorConfig(connector, done);
                ConfigInfos infos = done.get(TIMEOUT_S, TimeUnit.SECONDS);
                for (ConfigInfo info : infos.configs()) {
                    if (info.configValue() == null) {
                        continue;
                    }
                    for (String error : info.configValue().errors()) {
                        problems.add(info.configValue().name() + ": " + error);
                    }
                }
            } catch (java.util.concurrent.ExecutionException e) {
                Throwable cause = e.getCause() != null ? e.getCause() : e;
                problems.add(cause.getMessage());
            }
            found.add(problems);
        }
        Files.writeString(new File(args[1] + ".out").toPath(), json.writeValueAsString(found));
        System.exit(0);  // the herder's executor threads are not daemons
    }
}
