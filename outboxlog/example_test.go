package outboxlog_test

import (
	"context"
	"log/slog"
	"os"

	"github.com/outboxkit/outbox/outboxlog"
)

// A component logs to its Config's Logger, or to Default() when it is nil,
// with the context of the call.
func Example() {
	var configured *slog.Logger // a Config's Logger left nil
	log := outboxlog.Or(configured).With("component", "example")
	log.LogAttrs(context.Background(), slog.LevelWarn, "outbox hot queue refused events; left for the poller",
		slog.Int("events", 1))

	// A program's own logger, here writing text without time stamps:
	own := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	outboxlog.Or(own).Warn("outbox poll failed", outboxlog.Err(context.DeadlineExceeded))
	// Output:
	// level=WARN msg="outbox poll failed" error="context deadline exceeded"
}
