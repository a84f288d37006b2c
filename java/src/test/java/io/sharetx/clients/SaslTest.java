package io.sharetx.clients;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static io.sharetx.clients.Sidecar.Setup.pollSome;
import static org.junit.jupiter.api.Assertions.assertEquals;

/** The library's own connection authenticates as the producer does: SASL_PLAINTEXT PLAIN and SCRAM, through a proxy in front of the SASL listener. */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class SaslTest {

    @ParameterizedTest
    @ValueSource(strings = {"PLAIN", "SCRAM-SHA-256"})
    void commitOverSasl(String mechanism) throws Exception {
        Map<String, Object> conf = Sidecar.sasl(mechanism, "alice", "alice-secret");
        try (Sidecar.Setup s = new Sidecar.Setup(1, 2, conf)) {
            KafkaShareConsumer<String, String> c = s.consumer();
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
