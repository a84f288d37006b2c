package upstream

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// Logger is the option that makes one of the proxy's own franz-go clients
// log through the proxy's logger (franz-go's kslog plugin), each line with
// client=<name>. franz-go's info lines (a metadata refresh, a connection
// opened) show only when the proxy logs at debug; its own debug lines (every
// request) never: at the proxy's info level a client says only what went
// wrong (warn, error).
func Logger(l *slog.Logger, name string) kgo.Opt {
	floor := slog.LevelWarn
	if l.Enabled(context.Background(), slog.LevelDebug) {
		floor = slog.LevelInfo
	}
	return kgo.WithLogger(kslog.New(slog.New(atLeast{l.Handler(), floor}).With("client", name)))
}

// atLeast passes on only records at floor or above.
type atLeast struct {
	slog.Handler
	floor slog.Level
}

func (h atLeast) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.floor && h.Handler.Enabled(ctx, l)
}

func (h atLeast) WithAttrs(as []slog.Attr) slog.Handler {
	return atLeast{h.Handler.WithAttrs(as), h.floor}
}

func (h atLeast) WithGroup(name string) slog.Handler {
	return atLeast{h.Handler.WithGroup(name), h.floor}
}
