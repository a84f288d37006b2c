package io.sharetx.examples;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringSerializer;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutionException;

/** What both examples need besides the pattern they show: their options and --seed. */
final class ExampleSetup {
    private ExampleSetup() {
    }

    /**
     * --seed: the input topic (3 partitions) and any output topics (1 partition), the share group
     * reading from the start (share groups start at the latest offset unless told otherwise), and
     * n input records prefix-0.. (key and value alike).
     */
    static void seed(String bootstrap, String group, String input, String prefix, int n, String... outputs) throws Exception {
        Map<String, Object> conf = Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(conf)) {
            List<NewTopic> topics = new ArrayList<>();
            topics.add(new NewTopic(input, Optional.of(3), Optional.empty()));
            for (String out : outputs) {
                topics.add(new NewTopic(out, Optional.of(1), Optional.empty()));
            }
            for (NewTopic t : topics) {
                try {
                    admin.createTopics(List.of(t)).all().get();
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) {
                        throw e;
                    }
                }
            }
            admin.incrementalAlterConfigs(Map.of(new ConfigResource(ConfigResource.Type.GROUP, group),
                List.of(new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"), AlterConfigOp.OpType.SET)))).all().get();
        }
        try (KafkaProducer<String, String> p = new KafkaProducer<>(conf, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < n; i++) {
                p.send(new ProducerRecord<>(input, prefix + "-" + i, prefix + "-" + i));
            }
        }
        System.out.printf("seeded %d records into %s%n", n, input);
    }

    /** --name value, --name=value, or the system property name. */
    static String opt(String[] args, String name, String def) {
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--" + name) && i + 1 < args.length) {
                return args[i + 1];
            }
            if (args[i].startsWith("--" + name + "=")) {
                return args[i].substring(name.length() + 3);
            }
        }
        return System.getProperty(name, def);
    }
}
