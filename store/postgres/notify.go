package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/core"
)

// The Store signals new events with NOTIFY and watches for them with LISTEN,
// so that every instance's poller claims events written elsewhere at once.
var (
	_ core.InsertNotifier = (*Store)(nil)
	_ core.WakeSource     = (*Store)(nil)
)

// maxChannel is PostgreSQL's identifier limit (NAMEDATALEN-1), which LISTEN
// applies to channel names: a longer name would be truncated by LISTEN but
// not by pg_notify, and the two would never meet.
const maxChannel = 63

// channelPrefix keeps the outbox's channels apart from the application's.
const channelPrefix = "outbox:"

// channel returns the name of the NOTIFY channel of table: "outbox:" and the
// table name as Store.Table returns it (schema-qualified when it has a
// schema), so that two tables, in one schema or two, never share a channel.
// A name longer than PostgreSQL's 63 bytes keeps its first 54 bytes followed
// by "~" and 8 hexadecimal digits of a hash of the whole name. Table names
// hold only [A-Za-z0-9_.], so the channel is safe to quote as an identifier.
func channel(table string) string {
	name := channelPrefix + table
	if len(name) <= maxChannel {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s~%08x", name[:maxChannel-9], h.Sum32())
}

// NotifyInsert sends pg_notify on the table's channel (see channel) in tx,
// with an empty payload: PostgreSQL delivers it when tx commits, and
// delivers identical notifications of one transaction once, so a
// transaction that writes many times still wakes each listener once. It
// implements core.InsertNotifier.
func (s *Store) NotifyInsert(ctx context.Context, tx core.DBTX) error {
	if _, err := tx.ExecContext(ctx, "SELECT pg_notify($1, '')", s.channel); err != nil {
		return fmt.Errorf("notify %s: %w", s.channel, err)
	}
	return nil
}

// pool is what Watch needs of db: a dedicated connection.
type pool interface {
	Conn(ctx context.Context) (*sql.Conn, error)
}

// Watch takes a dedicated connection from db (a *sql.DB or *sqlx.DB opened
// with the pgx driver), runs LISTEN on the table's channel, calls wake, and
// then calls wake for every notification until ctx is done or the
// connection fails. It returns ctx's error or the connection's; the
// connection is then closed, not returned to the pool, since its session is
// still subscribed. It implements core.WakeSource.
func (s *Store) Watch(ctx context.Context, db core.DBTX, wake func()) error {
	p, ok := db.(pool)
	if !ok {
		return core.Invalid("postgres watch", "db is a %T, not a pool with dedicated connections", db)
	}
	conn, err := p.Conn(ctx)
	if err != nil {
		return fmt.Errorf("watch %s: connect: %w", s.channel, err)
	}
	defer conn.Close()
	var werr error
	// Raw hands the connection back to the pool when f returns unless f's
	// error matches driver.ErrBadConn, in which case database/sql closes it:
	// f always fails that way, as the session is subscribed (and, after a
	// cancelled wait, pgx has closed it anyway).
	rerr := conn.Raw(func(dc any) error {
		c, ok := pgxConn(dc)
		if !ok {
			werr = core.Invalid("postgres watch", "the pool's driver connection is a %T, not pgx's", dc)
			return driver.ErrBadConn
		}
		werr = s.listen(ctx, c, wake)
		return driver.ErrBadConn
	})
	if werr == nil { // f did not run: the connection was already unusable
		return fmt.Errorf("watch %s: %w", s.channel, rerr)
	}
	return werr
}

func (s *Store) listen(ctx context.Context, c *pgx.Conn, wake func()) error {
	if _, err := c.Exec(ctx, `LISTEN "`+s.channel+`"`); err != nil {
		return fmt.Errorf("watch %s: listen: %w", s.channel, err)
	}
	// Events committed before LISTEN took effect sent no signal we can
	// receive: one wake-up covers them.
	wake()
	for {
		if _, err := c.WaitForNotification(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("watch %s: %w", s.channel, err)
		}
		wake()
	}
}
