package io.sharetx.chaos;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * The worker's side of the line protocol with the chaos orchestrator (documented at the top of
 * e2e/chaos/worker.go): lines on stdout, commands on stdin ({@code stop}, {@code hold <point>
 * <duration>}; the end of stdin is a stop), SIGTERM and SIGINT also a stop. Nothing here is about
 * Kafka.
 */
final class Orchestrator {
    private final PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    private final Map<String, Duration> holds = new HashMap<>();
    private final CountDownLatch finished = new CountDownLatch(1);
    private volatile boolean stop;

    /** Prints one protocol line. */
    synchronized void say(String format, Object... args) {
        out.println(String.format(Locale.ROOT, format, args));
        out.flush();
    }

    /** Whether the worker was told to stop: it finishes its current transaction, then exits. */
    boolean stopping() {
        return stop;
    }

    /**
     * Starts reading commands from stdin, and makes SIGTERM/SIGINT a stop: the JVM runs shutdown
     * hooks on them, and the hook waits (up to a minute) for the worker to say it {@link #finished}.
     */
    void listen() {
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                for (String line; (line = in.readLine()) != null; ) {
                    command(line);
                }
            } catch (Exception e) {
                say("ERR reading stdin: %s", oneLine(e.toString()));
            }
            stop = true; // the orchestrator is gone
        }, "orchestrator-stdin");
        reader.setDaemon(true);
        reader.start();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stop = true;
            try {
                finished.await(60, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "orchestrator-stop"));
    }

    private void command(String line) {
        String[] f = line.trim().split("\\s+");
        if (f.length == 1 && f[0].isEmpty()) {
            return;
        }
        if (f.length == 1 && f[0].equals("stop")) {
            stop = true;
            return;
        }
        if (f.length == 3 && f[0].equals("hold")) {
            try {
                Duration d = WorkerConfig.goDuration(f[2]);
                synchronized (holds) {
                    holds.put(f[1], d);
                }
            } catch (NumberFormatException e) {
                say("ERR bad command \"%s\": %s", line, e.getMessage());
            }
            return;
        }
        say("ERR unknown command \"%s\"", line);
    }

    /**
     * At {@code point} (polled, staged, committed): if the orchestrator asked for a hold there,
     * says HOLD, sleeps, says HOLD-END and returns true (a fault lands during the sleep).
     */
    boolean hold(String point) {
        Duration d;
        synchronized (holds) {
            d = holds.remove(point);
        }
        if (d == null) {
            return false;
        }
        say("HOLD %s", point);
        try {
            Thread.sleep(d.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        say("HOLD-END %s", point);
        return true;
    }

    /** The worker said EXIT (or gave up): a shutdown hook waiting for it may let the JVM end. */
    void finished() {
        finished.countDown();
    }

    /** {@code s} on one protocol line. */
    static String oneLine(String s) {
        return s == null ? "" : s.replace('\n', ' ').replace('\r', ' ');
    }
}
