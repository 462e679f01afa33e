package pgxtx_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/roundtrips"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/pgxtx"
)

// holding is what the HoldWrites tests share: an outbox table, a Writer on
// it (no hook, no NOTIFY: the INSERT alone), a business table, a pool of
// one connection whose round trips rec records, and a Manager that holds
// writes as hold says.
type holding struct {
	tg     testdb.Target
	pool   *pgxpool.Pool
	rec    *roundtrips.Recorder
	w      *core.Writer
	m      *pgxtx.Manager
	biz    string
	insert string // the business row's INSERT
}

func newHolding(t *testing.T, hold pgxtx.Hold) *holding {
	h := &holding{tg: testdb.Postgres(t), rec: &roundtrips.Recorder{}}
	h.pool = tracedPool(t, h.rec)
	h.biz = items(t, h.pool)
	h.insert = "INSERT INTO " + h.biz + " (name) VALUES ($1)"
	var err error
	if h.w, err = core.NewWriter(core.WriterConfig{Store: h.tg.Store, NoNotify: true}); err != nil {
		t.Fatal(err)
	}
	h.m = newManager(t, h.pool, pgxtx.Config{HoldWrites: hold})
	return h
}

// events returns the ids in the outbox table, in id order.
func (h *holding) events(t *testing.T) string {
	t.Helper()
	rows, _ := h.pool.Query(context.Background(), "SELECT event_id FROM "+h.tg.Table+" ORDER BY event_id")
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(ids, " ")
}

func (h *holding) write(ctx context.Context, t *testing.T, id string) error {
	_, err := h.w.Write(ctx, envelope(t, "Invoice", "i-1", "Placed", id))
	return err
}

// TestWritesSentWithCommit: with HoldAll, the outbox's INSERT
// goes in one round trip with COMMIT: a business statement, a write and
// COMMIT cost two round trips, a write alone one.
func TestWritesSentWithCommit(t *testing.T) {
	h := newHolding(t, pgxtx.HoldAll)
	ctx := context.Background()
	run := func(biz, id string) error {
		return h.m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if biz != "" {
				if _, err := tx.Exec(ctx, h.insert, biz); err != nil {
					return err
				}
			}
			return h.write(ctx, t, id)
		})
	}
	if err := run("warm", "00000000000000000000000000"); err != nil { // prepares the statements
		t.Fatal(err)
	}
	h.rec.Start()
	if err := run("a", "00000000000000000000000001"); err != nil {
		t.Fatal(err)
	}
	if err := run("", "00000000000000000000000002"); err != nil {
		t.Fatal(err)
	}
	sent := h.rec.Stop()
	outboxInsert := `insert into "` + strings.ToLower(h.tg.Table) + `"`
	if len(sent) != 3 || sent[0] != "begin + "+strings.ToLower(h.insert) ||
		!strings.HasPrefix(sent[1], outboxInsert) || !strings.HasSuffix(sent[1], " + commit") ||
		!strings.HasPrefix(sent[2], "begin + "+outboxInsert) || !strings.HasSuffix(sent[2], " + commit") {
		t.Fatalf("round trips %q; want BEGIN with the business row, then the event's row with COMMIT; "+
			"then BEGIN, the event's row and COMMIT in one", sent)
	}
	if got := h.events(t); got != "00000000000000000000000000 00000000000000000000000001 00000000000000000000000002" {
		t.Fatalf("events %q", got)
	}
	if n := count(t, h.pool, h.biz); n != 2 {
		t.Fatalf("%d business rows, want 2", n)
	}
}

// TestHeldWriteFails: a held write that fails (a duplicate id) fails what it
// was sent with, naming the outbox write, and the whole transaction rolls
// back, after-rollback callbacks run, the connection is left idle.
func TestHeldWriteFails(t *testing.T) {
	h := newHolding(t, pgxtx.HoldAll)
	ctx := context.Background()
	const dup = "00000000000000000000000009"
	if err := h.m.Do(ctx, func(ctx context.Context, _ pgx.Tx) error { return h.write(ctx, t, dup) }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, with string
		fn         func(ctx context.Context, tx pgx.Tx) error
	}{
		{"sent with COMMIT", "sent with COMMIT", func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, h.insert, "x"); err != nil {
				return err
			}
			return h.write(ctx, t, dup)
		}},
		{"sent with a statement", "sent with this statement", func(ctx context.Context, tx pgx.Tx) error {
			if err := h.write(ctx, t, dup); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, h.insert, "x")
			return err
		}},
		{"sent with a query", "sent with this statement", func(ctx context.Context, tx pgx.Tx) error {
			if err := h.write(ctx, t, dup); err != nil {
				return err
			}
			var n int
			return tx.QueryRow(ctx, "SELECT count(*) FROM "+h.biz+" WHERE name <> $1", "").Scan(&n)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rolledBack := false
			err := h.m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
				t2, _ := pgxtx.From(ctx)
				t2.AfterRollback(func(context.Context) { rolledBack = true })
				return c.fn(ctx, tx)
			})
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23505" || !errors.Is(err, core.ErrDuplicateEvent) ||
				!strings.Contains(err.Error(), "outbox write "+c.with) {
				t.Fatalf("Do: %v; want the duplicate id (core.ErrDuplicateEvent), named as the outbox write %s", err, c.with)
			}
			if !rolledBack {
				t.Error("after-rollback callbacks did not run")
			}
			if n := count(t, h.pool, h.biz); n != 0 {
				t.Fatalf("%d business rows, want 0: the transaction rolls back", n)
			}
			if got := h.events(t); got != dup {
				t.Fatalf("events %q, want the first write's alone", got)
			}
			var status string
			if err := h.pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
				status = string(c.Conn().PgConn().TxStatus())
				return nil
			}); err != nil || status != "I" {
				t.Fatalf("the pool's connection: status %q, %v; want I", status, err)
			}
		})
	}
}

// TestHeldWritesKeepTheirPlace: a held write runs before anything after it:
// later statements see its row, a savepoint rolled back after it undoes it;
// a write in a savepoint begun with tx.Begin, which pgx runs on the
// connection directly, is not held; a rollback sends nothing.
func TestHeldWritesKeepTheirPlace(t *testing.T) {
	h := newHolding(t, pgxtx.HoldAll)
	ctx := context.Background()
	const e1, e2, e3, e4 = "00000000000000000000000001", "00000000000000000000000002", "00000000000000000000000003", "00000000000000000000000004"
	err := h.m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if err := h.write(ctx, t, e1); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+h.tg.Table+" WHERE event_id = $1", e1).Scan(&n); err != nil {
			return err
		}
		if n != 1 {
			t.Errorf("a query after the write sees %d rows of it, want 1", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	err = h.m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			return err
		}
		if err := h.write(ctx, t, e2); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	err = h.m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if err := h.write(ctx, t, e3); err != nil {
			return err
		}
		return sp.Rollback(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}

	h.rec.Start()
	boom := errors.New("roll back")
	if err := h.m.Do(ctx, func(ctx context.Context, _ pgx.Tx) error {
		if err := h.write(ctx, t, e4); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("Do: %v", err)
	}
	h.rec.Want(t) // nothing sent: BEGIN and the write were both still held

	if got := h.events(t); got != e1 {
		t.Fatalf("events %q, want %s alone", got, e1)
	}
}

// TestHoldWritesDefault: by default a write of events whose ids the library
// generated is held and sent with COMMIT, and one with an id the caller
// chose is sent at Write, whose error names a duplicate; HoldNone holds
// nothing.
func TestHoldWritesDefault(t *testing.T) {
	h := newHolding(t, pgxtx.Config{}.HoldWrites)
	ctx := context.Background()
	outboxInsert := `insert into "` + strings.ToLower(h.tg.Table) + `"`
	// run writes envs after a business row and returns the round trips
	// it took.
	runs := 0
	run := func(m *pgxtx.Manager, envs ...core.Envelope) ([]string, error) {
		runs++
		h.rec.Start()
		err := m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, h.insert, fmt.Sprint("x", runs)); err != nil {
				return err
			}
			_, err := h.w.WriteAll(ctx, envs)
			return err
		})
		return h.rec.Stop(), err
	}
	generated := func() core.Envelope { return envelope(t, "Invoice", "i-1", "Placed", "") }
	const chosen = "00000000000000000000000009"
	if _, err := run(h.m, envelope(t, "Invoice", "i-1", "Placed", "00000000000000000000000000")); err != nil {
		t.Fatal(err) // prepares the statements
	}

	held := func(sent []string) bool {
		return len(sent) == 2 && strings.HasPrefix(sent[1], outboxInsert) && strings.HasSuffix(sent[1], " + commit")
	}
	sentAtWrite := func(sent []string) bool {
		return len(sent) == 3 && strings.HasPrefix(sent[1], outboxInsert) && sent[2] == "commit"
	}
	if sent, err := run(h.m, generated(), generated()); err != nil || !held(sent) {
		t.Errorf("generated ids: round trips %q, %v; want the events' row sent with COMMIT", sent, err)
	}
	if sent, err := run(h.m, envelope(t, "Invoice", "i-1", "Placed", chosen)); err != nil || !sentAtWrite(sent) {
		t.Errorf("an id the caller chose: round trips %q, %v; want the row sent at Write", sent, err)
	}
	if sent, err := run(h.m, generated(), envelope(t, "Invoice", "i-1", "Placed", "00000000000000000000000008")); err != nil || !sentAtWrite(sent) {
		t.Errorf("a generated id and a chosen one in one write: round trips %q, %v; want the row sent at Write", sent, err)
	}
	var writeErr error
	if err := h.m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, writeErr = h.w.Write(ctx, envelope(t, "Invoice", "i-1", "Placed", chosen))
		return writeErr
	}); !errors.Is(writeErr, core.ErrDuplicateEvent) || !errors.Is(err, core.ErrDuplicateEvent) {
		t.Errorf("a duplicate id the caller chose: Write %v, Do %v; want core.ErrDuplicateEvent from Write", writeErr, err)
	}

	none := newManager(t, h.pool, pgxtx.Config{HoldWrites: pgxtx.HoldNone})
	if sent, err := run(none, generated()); err != nil || !sentAtWrite(sent) {
		t.Errorf("HoldNone: round trips %q, %v; want the row sent at Write", sent, err)
	}
	if n := count(t, h.pool, h.tg.Table); n != 7 {
		t.Errorf("%d events, want 7", n)
	}
}

func TestHoldWritesInvalid(t *testing.T) {
	for _, hold := range []pgxtx.Hold{-1, pgxtx.HoldNone + 1} {
		_, err := pgxtx.New(&pgx.Conn{}, pgxtx.Config{HoldWrites: hold})
		if !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), "HoldWrites") || !strings.Contains(err.Error(), hold.String()) {
			t.Errorf("New with HoldWrites %v: %v; want core.ErrInvalid naming the field and the value", hold, err)
		}
	}
}

// TestHeldWritesBeforeABatch: a batch sent after a held write goes out
// with it, behind it: its results, its callbacks included, are its own
// statements', which see the held row.
func TestHeldWritesBeforeABatch(t *testing.T) {
	h := newHolding(t, pgxtx.HoldGeneratedIDs)
	ctx := context.Background()
	var seen, inserted int64
	h.rec.Start()
	err := h.m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := h.w.Write(ctx, envelope(t, "Invoice", "i-1", "Placed", "")); err != nil {
			return err
		}
		var b pgx.Batch
		b.Queue("SELECT count(*) FROM "+h.tg.Table+" WHERE aggregate_id = $1", "i-1").QueryRow(func(r pgx.Row) error {
			return r.Scan(&seen)
		})
		b.Queue(h.insert, "b-1").Exec(func(tag pgconn.CommandTag) error {
			inserted = tag.RowsAffected()
			return nil
		})
		b.Queue(h.insert, "b-2")
		br := tx.SendBatch(ctx, &b)
		if err := br.Close(); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sent := h.rec.Stop()
	if len(sent) == 0 || !strings.HasPrefix(sent[0], `begin + insert into "`+strings.ToLower(h.tg.Table)+`"`) ||
		!strings.Contains(sent[0], " + select count(*)") {
		t.Fatalf("round trips %q; want BEGIN, the event's row and the batch in one", sent)
	}
	if seen != 1 || inserted != 1 {
		t.Fatalf("the batch's query saw %d events, its first INSERT inserted %d rows; want 1 and 1", seen, inserted)
	}
	if n := count(t, h.pool, h.biz); n != 2 {
		t.Fatalf("%d business rows, want 2", n)
	}
	if n := count(t, h.pool, h.tg.Table); n != 1 {
		t.Fatalf("%d events, want 1", n)
	}
}

// TestHeldWritesOfAnOrderingStore: on a store that orders some aggregate
// types, a write of unordered events is held, and one with an ordered event
// (which reads its sequence number) is sent at Write; a Writer that signals
// its writes (no hot path) holds the signal with them.
func TestHeldWritesOfAnOrderingStore(t *testing.T) {
	h := newHolding(t, pgxtx.HoldGeneratedIDs)
	ctx := context.Background()
	outboxInsert := `insert into "` + strings.ToLower(h.tg.Table) + `"`
	for _, c := range []struct {
		name     string
		notify   bool
		aggTypes []string
		want     func(sent []string) bool
	}{
		{"unordered", false, []string{"Invoice", "Invoice"}, func(sent []string) bool {
			return len(sent) == 2 && strings.HasPrefix(sent[1], outboxInsert) && strings.HasSuffix(sent[1], " + commit")
		}},
		{"ordered", false, []string{"Invoice", "Order"}, func(sent []string) bool {
			return len(sent) >= 3 && sent[len(sent)-1] == "commit"
		}},
		{"unordered, signalled", true, []string{"Invoice"}, func(sent []string) bool {
			return len(sent) == 2 && strings.HasPrefix(sent[1], outboxInsert) &&
				strings.HasSuffix(sent[1], " + select pg_notify($1, '') + commit")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w, err := core.NewWriter(core.WriterConfig{Store: h.tg.Ordered, NoNotify: !c.notify})
			if err != nil {
				t.Fatal(err)
			}
			run := func(biz string) ([]string, error) {
				var envs []core.Envelope
				for _, at := range c.aggTypes {
					envs = append(envs, envelope(t, at, "k-1", "Placed", ""))
				}
				h.rec.Start()
				err := h.m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, h.insert, biz); err != nil {
						return err
					}
					_, err := w.WriteAll(ctx, envs)
					return err
				})
				return h.rec.Stop(), err
			}
			if _, err := run(c.name + " warm"); err != nil { // prepares the statements
				t.Fatal(err)
			}
			if sent, err := run(c.name); err != nil || !c.want(sent) {
				t.Errorf("round trips %q, %v", sent, err)
			}
		})
	}
}

// TestHeldWriteOfManyStatements: a write too large for one statement is
// held as several, each with its own arguments: the store builds the next
// statement in the argument slice it passed for the one before, as
// database/sql allows once ExecContext has returned.
func TestHeldWriteOfManyStatements(t *testing.T) {
	h := newHolding(t, pgxtx.HoldGeneratedIDs)
	ctx := context.Background()
	envs := make([]core.Envelope, 2500)
	want := make([]string, len(envs))
	for i := range envs {
		envs[i] = envelope(t, "Invoice", fmt.Sprint("i-", i), "Placed", "")
		want[i] = envs[i].ID()
	}
	h.rec.Start()
	err := h.m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, h.insert, "many"); err != nil {
			return err
		}
		_, err := h.w.WriteAll(ctx, envs)
		return err
	})
	sent := h.rec.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 2 || !strings.HasSuffix(sent[1], " + commit") {
		t.Errorf("round trips %d, the last %.60q...; want the write's statements sent with COMMIT", len(sent), sent[len(sent)-1])
	}
	slices.Sort(want)
	if got := h.events(t); got != strings.Join(want, " ") {
		t.Fatalf("the outbox holds %d ids, not the %d written", len(strings.Fields(got)), len(want))
	}
}
