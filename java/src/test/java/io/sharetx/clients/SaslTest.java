package io.sharetx.clients;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.stream.Stream;

import static io.sharetx.clients.Sidecar.Setup.pollSome;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The library's own connections speak the security protocol of the producer's configuration, with
 * kafka-clients' own network stack: SASL_PLAINTEXT with PLAIN, SCRAM and OAUTHBEARER (an unsecured
 * token, subject alice) through a proxy in front of the SASL listener, SSL through a proxy whose
 * listeners speak TLS, SASL_SSL through one that speaks TLS in front of the SASL listener. Every
 * client of the application (admin, producer, share consumer) uses the same configuration.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class SaslTest {

    static Stream<Arguments> protocols() {
        Supplier<Map<String, Object>> same = Map::of;
        return Stream.of(
            Arguments.of("SASL_PLAINTEXT PLAIN", (Supplier<Map<String, Object>>) () -> Sidecar.sasl("PLAIN", "alice", "alice-secret"), same),
            Arguments.of("SASL_PLAINTEXT SCRAM-SHA-256", (Supplier<Map<String, Object>>) () -> Sidecar.sasl("SCRAM-SHA-256", "alice", "alice-secret"), same),
            // The producer (and so the library's own connection) on OAUTHBEARER, the share
            // consumer on PLAIN as the same user: the sidecar must read the token's subject to
            // see one principal (User:alice) in both, or it refuses the call.
            Arguments.of("SASL_PLAINTEXT OAUTHBEARER", (Supplier<Map<String, Object>>) () -> Sidecar.oauth("alice"),
                (Supplier<Map<String, Object>>) () -> Sidecar.sasl("PLAIN", "alice", "alice-secret")),
            Arguments.of("SSL", (Supplier<Map<String, Object>>) () -> Sidecar.tls(null, null, null), same),
            Arguments.of("SASL_SSL SCRAM-SHA-256", (Supplier<Map<String, Object>>) () -> Sidecar.tls("SCRAM-SHA-256", "alice", "alice-secret"), same));
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("protocols")
    void commitOverSecurityProtocol(String name, Supplier<Map<String, Object>> config, Supplier<Map<String, Object>> consumerConfig) throws Exception {
        Map<String, Object> conf = config.get();
        try (Sidecar.Setup s = new Sidecar.Setup(1, 2, conf)) {
            KafkaShareConsumer<String, String> c = s.consumer(Sidecar.unique("jmember"), consumerConfig.get());
            SharetxProducer<String, String> p = s.producer();
            p.initTransactions();
            int done = 0;
            while (done < 2) {
                ConsumerRecords<String, String> rs = pollSome(c, Duration.ofSeconds(60));
                p.beginTransaction();
                for (ConsumerRecord<String, String> r : rs) {
                    p.send(new ProducerRecord<>(s.out, r.key(), "out-" + r.value()));
                }
                p.sendShareAcknowledgementsToTransaction(ShareAcknowledgements.fromRecords(rs, AcknowledgeType.ACCEPT),
                    ShareTransactions.shareGroupMetadata(c));
                p.commitTransaction();
                ShareTransactions.acknowledgeHandedOver(c, rs);
                done += rs.count();
            }
            c.poll(Duration.ofMillis(500));
            assertEquals(2, s.committedOutputs(Duration.ofSeconds(3)).size());
            s.closeClients();
            assertEquals(List.of(), s.leftForFreshMember(Duration.ofSeconds(3)));
        }
    }
}
