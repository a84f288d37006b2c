package upstream

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sharetx/sharetx/internal/syncbuf"
)

// A franz-go client of the proxy's logs through the proxy's logger, with its
// name, at warn and above when the proxy logs at info, and its info lines
// too when the proxy logs at debug.
func TestLoggerFloors(t *testing.T) {
	for _, tc := range []struct {
		level         slog.Level
		wantKgo       kgo.LogLevel
		info, warning bool
	}{
		{slog.LevelInfo, kgo.LogLevelWarn, false, true},
		{slog.LevelDebug, kgo.LogLevelInfo, true, true},
		{slog.LevelError, kgo.LogLevelError, false, false},
	} {
		var buf syncbuf.Buffer
		l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level}))
		cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), Logger(l, "upstream"))
		if err != nil {
			t.Fatal(err)
		}
		lg := cl.OptValue(kgo.WithLogger).(kgo.Logger)
		if got := lg.Level(); got != tc.wantKgo {
			t.Errorf("proxy at %s: franz-go at %s, want %s", tc.level, got, tc.wantKgo)
		}
		lg.Log(kgo.LogLevelInfo, "an info line", "k", 1)
		lg.Log(kgo.LogLevelWarn, "a warning", "k", 2)
		cl.Close()
		out := buf.String()
		if got := strings.Contains(out, "an info line"); got != tc.info {
			t.Errorf("proxy at %s: info line logged = %v, want %v:\n%s", tc.level, got, tc.info, out)
		}
		if got := strings.Contains(out, `msg="a warning" client=upstream k=2`); got != tc.warning {
			t.Errorf("proxy at %s: warning logged with the client's name = %v, want %v:\n%s", tc.level, got, tc.warning, out)
		}
	}
}

// A real client's complaint reaches the log: a seed that refuses
// connections is a warning of the named client.
func TestLoggerCarriesClientWarnings(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	addr := c.ListenAddrs()[0]
	c.Close() // nothing listens there any more
	var buf syncbuf.Buffer
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), Logger(l, "shadow-tail"), kgo.RequestRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = cl.Ping(ctx)
	if out := buf.String(); !strings.Contains(out, "client=shadow-tail") || !strings.Contains(out, "level=WARN") {
		t.Errorf("no warning of the shadow-tail client logged:\n%s", out)
	}
}
