package chaos

import (
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox"
)

// Node is the command line the helper processes (chaosnode, relaynode)
// share: a role, the database and tables, the delivering role's poller
// and listener settings, -v and -position.
type Node struct {
	Role, Dialect, DSN, Table, Deliveries string
	Lease, Interval, Work                 time.Duration
	Verbose, Position                     bool
}

// Flags registers n's flags on fs; deliverer names the role that delivers
// (the other is "writer") and dialects the dialects the process takes, for
// the help texts.
func (n *Node) Flags(fs *flag.FlagSet, deliverer, dialects string) {
	fs.StringVar(&n.Role, "role", "", deliverer+" or writer")
	fs.StringVar(&n.Dialect, "dialect", "", dialects)
	fs.StringVar(&n.DSN, "dsn", "", "data source name (sqlite: file path)")
	fs.StringVar(&n.Table, "table", "", "outbox table")
	fs.StringVar(&n.Deliveries, "deliveries", "", "deliveries table ("+deliverer+")")
	fs.DurationVar(&n.Lease, "lease", 3*time.Second, "poller lease timeout ("+deliverer+")")
	fs.DurationVar(&n.Interval, "interval", 100*time.Millisecond, "poll interval ("+deliverer+")")
	fs.DurationVar(&n.Work, "work", 0, "time the listener spends in its transaction, as business work would ("+deliverer+")")
	fs.BoolVar(&n.Verbose, "v", false, "log the outbox to stderr")
	fs.BoolVar(&n.Position, "position", false, "position delivery (outbox.DeliveryPosition) in both roles")
}

// Delivery is the outbox.Delivery of -position.
func (n *Node) Delivery() outbox.Delivery {
	if n.Position {
		return outbox.DeliveryPosition
	}
	return outbox.DeliveryClaim
}

// Logger returns the logger of the outbox: with -v, the records at level
// or above to stderr, with the owner when not "", else none.
func (n *Node) Logger(level zerolog.Level, owner string) *slog.Logger {
	if !n.Verbose {
		return slog.New(slog.DiscardHandler)
	}
	zc := zerolog.New(os.Stderr).Level(level).With().Timestamp()
	if owner != "" {
		zc = zc.Str("owner", owner)
	}
	return slog.New(zerolog.NewSlogHandler(zc.Logger()))
}
