package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/txctx"
)

// Counters is the business table of the ordered kill run: one row per key
// (aggregate) holding the number of events written to it. A business
// transaction adds to its key's counter, which locks the row until the
// transaction ends, and numbers its events from it: so per key the events
// are numbered 1, 2, 3... in commit order, fixed by the application and not
// by the outbox, and a transaction that rolls back (or dies with its
// process) takes its numbers back.
type Counters struct {
	dialect, table string
}

// NewCounters validates table and returns the counters table of dialect.
func NewCounters(dialect, table string) (Counters, error) {
	if !identRE.MatchString(table) {
		return Counters{}, fmt.Errorf("counters table %q is not a plain identifier", table)
	}
	switch dialect {
	case "postgres", "mysql", "sqlite":
	default:
		return Counters{}, fmt.Errorf("unknown dialect %q", dialect)
	}
	return Counters{dialect: dialect, table: table}, nil
}

// Table returns the table name.
func (c Counters) Table() string { return c.table }

// Create creates the table with the keys "0".."keys-1" at 0.
func (c Counters) Create(ctx context.Context, db core.DBTX, keys int) error {
	q := "CREATE TABLE " + c.table + " (k VARCHAR(16) NOT NULL PRIMARY KEY, n BIGINT NOT NULL)"
	if c.dialect == "mysql" {
		q += " ENGINE = InnoDB"
	}
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("create counters table: %w", err)
	}
	var sb strings.Builder
	sb.WriteString("INSERT INTO " + c.table + " (k, n) VALUES ")
	for i := range keys {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "('%d', 0)", i)
	}
	if _, err := db.ExecContext(ctx, sb.String()); err != nil {
		return fmt.Errorf("fill counters table: %w", err)
	}
	return nil
}

// Drop drops the table.
func (c Counters) Drop(ctx context.Context, db core.DBTX) error {
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+c.table); err != nil {
		return fmt.Errorf("drop counters table: %w", err)
	}
	return nil
}

// Add adds n to key's counter in tx, locking its row until tx ends, and
// returns the counter after it.
func (c Counters) Add(ctx context.Context, tx core.DBTX, key string, n int) (int64, error) {
	if c.dialect == "mysql" {
		// No RETURNING: the new value comes back as the statement's insert id.
		res, err := tx.ExecContext(ctx, "UPDATE "+c.table+" SET n = LAST_INSERT_ID(n + ?) WHERE k = ?", n, key)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	q := "UPDATE " + c.table + " SET n = n + ? WHERE k = ? RETURNING n"
	if c.dialect == "postgres" {
		q = "UPDATE " + c.table + " SET n = n + $1 WHERE k = $2 RETURNING n"
	}
	var last int64
	if err := tx.QueryRowContext(ctx, q, n, key).Scan(&last); err != nil {
		return 0, err
	}
	return last, nil
}

// CountedPayload is the JSON of an event of the ordered kill run: its key
// and its number in the key, from the key's counter.
type CountedPayload struct {
	Key    string `json:"k"`
	N      int64  `json:"n"`
	Poison bool   `json:"poison"`
}

// Counted returns the key and number of every event of outbox, by id,
// from their payloads.
func Counted(ctx context.Context, db core.DBTX, outbox string) (map[string]CountedPayload, error) {
	rows, err := db.QueryContext(ctx, "SELECT event_id, payload FROM "+outbox)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	out := map[string]CountedPayload{}
	for rows.Next() {
		var id string
		var payload []byte
		if err := rows.Scan(&id, &payload); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		var p CountedPayload
		if err := json.Unmarshal(payload, &p); err != nil {
			return nil, fmt.Errorf("event %s: payload %q: %w", id, payload, err)
		}
		out[id] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return out, nil
}

// WriteCounted commits, in one business transaction begun by txm, count
// events of key numbered by its counter in c, with OccurredAt skewed by
// skew and marked poison if poison, through w. It retries failed attempts for up to a minute, each
// bounded by 10 s, as WriteWithRetry does; a retry writes new events (new
// ids, numbered again by the counter), so that a COMMIT that succeeded
// although the client saw an error leaves no gap in the key's numbers.
func WriteCounted(txm *txctx.Manager, w *core.Writer, c Counters, key string, count int, skew time.Duration, poison bool) (retries int, err error) {
	deadline := time.Now().Add(time.Minute)
	backoff := 20 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = txm.Do(ctx, func(ctx context.Context) error {
			tx, ok := core.TxFromContext(ctx)
			if !ok {
				return core.ErrNoTransaction
			}
			last, err := c.Add(ctx, tx, key, count)
			if err != nil {
				return err
			}
			envs := make([]core.Envelope, count)
			for i := range envs {
				p, err := json.Marshal(CountedPayload{Key: key, N: last - int64(count) + 1 + int64(i), Poison: poison})
				if err != nil {
					return err
				}
				envs[i], err = core.NewEnvelope(core.EnvelopeSpec{Type: EventType, AggregateType: Aggregate, AggregateID: key,
					OccurredAt: time.Now().Add(skew), JSON: p})
				if err != nil {
					return err
				}
			}
			_, err = w.WriteAll(ctx, envs)
			return err
		})
		cancel()
		switch {
		case err == nil:
			return retries, nil
		case errors.Is(err, core.ErrInvalid):
			return retries, err
		case time.Now().After(deadline):
			return retries, fmt.Errorf("write %d events of key %s: giving up after %d retries: %w", count, key, retries, err)
		}
		retries++
		time.Sleep(backoff) // back off before the next attempt, as an application would
		backoff = min(2*backoff, time.Second)
	}
}

// AllCounted returns every delivery recorded in d, each with its event's key
// and number from its payload (as WriteCounted writes them), as All orders
// them (by event, then start); a delivery of an event outbox does not hold
// is an error.
func (d Deliveries) AllCounted(ctx context.Context, db core.DBTX, outbox string) ([]OrderedDelivery, error) {
	ds, err := d.All(ctx, db)
	if err != nil {
		return nil, err
	}
	counted, err := Counted(ctx, db, outbox)
	if err != nil {
		return nil, err
	}
	out := make([]OrderedDelivery, 0, len(ds))
	for _, dl := range ds {
		p, ok := counted[dl.EventID]
		if !ok {
			return nil, fmt.Errorf("delivery of %s, which the outbox table does not hold", dl.EventID)
		}
		out = append(out, OrderedDelivery{Delivery: dl, AggregateID: p.Key, Seq: p.N})
	}
	return out, nil
}
