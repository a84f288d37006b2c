package io.sharetx.chaos;

import java.math.BigDecimal;
import java.time.Duration;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The Java chaos worker's command line: the Go worker's flags (e2e/chaos/worker.go and
 * e2e/sim/worker.go's WorkerConfig), parsed as Go's flag package does ({@code --name value},
 * {@code --name=value}, one or two dashes), durations in Go's syntax ("20s", "1m30s", "500ms").
 */
final class WorkerConfig {
    String name = "worker";
    String bootstrap = "";
    String group = "";
    String in = "";
    String out = "";
    String txnId = "";
    int maxPoll = 50;
    double abortRate = 0.15;
    long seed = 1;
    Duration txnTimeout = Duration.ofSeconds(20);
    /** The Go worker's kgo log level; accepted for the same command line, not used (see the README). */
    String kgoLog = "warn";

    static WorkerConfig parse(String[] args) {
        WorkerConfig c = new WorkerConfig();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (!a.startsWith("-") || a.equals("-") || a.equals("--")) {
                throw new IllegalArgumentException("unexpected argument " + a);
            }
            String flag = a.replaceFirst("^--?", "");
            String value;
            int eq = flag.indexOf('=');
            if (eq >= 0) {
                value = flag.substring(eq + 1);
                flag = flag.substring(0, eq);
            } else if (i + 1 < args.length) {
                value = args[++i];
            } else {
                throw new IllegalArgumentException("flag needs an argument: -" + flag);
            }
            try {
                switch (flag) {
                    case "name" -> c.name = value;
                    case "bootstrap" -> c.bootstrap = value;
                    case "group" -> c.group = value;
                    case "in" -> c.in = value;
                    case "out" -> c.out = value;
                    case "txn-id" -> c.txnId = value;
                    case "max-poll" -> c.maxPoll = Integer.parseInt(value);
                    case "abort-rate" -> c.abortRate = Double.parseDouble(value);
                    case "seed" -> c.seed = Long.parseLong(value);
                    case "txn-timeout" -> c.txnTimeout = goDuration(value);
                    case "kgo-log" -> c.kgoLog = value;
                    default -> throw new IllegalArgumentException("flag provided but not defined: -" + flag);
                }
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("invalid value \"" + value + "\" for flag -" + flag + ": " + e.getMessage());
            }
        }
        if (c.bootstrap.isEmpty() || c.group.isEmpty() || c.in.isEmpty() || c.out.isEmpty() || c.txnId.isEmpty()) {
            throw new IllegalArgumentException("--bootstrap, --group, --in, --out and --txn-id are required");
        }
        if (c.maxPoll < 1 || c.abortRate < 0 || c.abortRate >= 1) {
            throw new IllegalArgumentException("--max-poll must be >= 1, --abort-rate in [0,1)");
        }
        return c;
    }

    private static final Pattern DURATION_PART = Pattern.compile("(\\d+(?:\\.\\d*)?|\\.\\d+)(ns|us|µs|μs|ms|s|m|h)");

    /** A duration in Go's time.ParseDuration syntax (non-negative): "0", "25s", "1m30s", "1.5s", "300ms". */
    static Duration goDuration(String s) {
        if (s.equals("0")) {
            return Duration.ZERO;
        }
        Matcher m = DURATION_PART.matcher(s);
        BigDecimal nanos = BigDecimal.ZERO;
        int at = 0;
        while (at < s.length() && m.find(at) && m.start() == at) {
            BigDecimal unit = switch (m.group(2)) {
                case "ns" -> BigDecimal.ONE;
                case "us", "µs", "μs" -> BigDecimal.valueOf(1_000L);
                case "ms" -> BigDecimal.valueOf(1_000_000L);
                case "s" -> BigDecimal.valueOf(1_000_000_000L);
                case "m" -> BigDecimal.valueOf(60_000_000_000L);
                default -> BigDecimal.valueOf(3_600_000_000_000L);
            };
            nanos = nanos.add(new BigDecimal(m.group(1)).multiply(unit));
            at = m.end();
        }
        if (at == 0 || at != s.length()) {
            throw new NumberFormatException("invalid duration \"" + s + "\"");
        }
        return Duration.ofNanos(nanos.longValue());
    }
}
