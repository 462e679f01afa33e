package poller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/poller"
)

// countingStore counts the claims of the store it wraps and signals each on
// claimed; through Unwrap the poller still finds the store's wake source.
type countingStore struct {
	core.Store
	claimed chan struct{}
}

func (s countingStore) Unwrap() core.Store { return s.Store }

func (s countingStore) Claim(ctx context.Context, db core.DBTX, p core.ClaimParams) ([]core.Event, []core.RowError, error) {
	evs, bad, err := s.Store.Claim(ctx, db, p)
	select {
	case s.claimed <- struct{}{}:
	default:
	}
	return evs, bad, err
}

// chanHandler hands every event it takes to got.
type chanHandler struct{ got chan core.Event }

func (h chanHandler) EnqueueCold(ev core.Event) bool {
	select {
	case h.got <- ev:
		return true
	default:
		return false
	}
}

func (h chanHandler) ColdCapacity() int { return cap(h.got) - len(h.got) }

// watchFixture is a poller on PostgreSQL polling once an hour, so that only
// its watch can make it claim events written after it started.
type watchFixture struct {
	tg      testdb.Target
	poller  *poller.Poller
	claimed chan struct{}
	got     chan core.Event
	writer  *core.Writer
}

func newWatchFixture(t *testing.T) watchFixture {
	t.Helper()
	tg := testdb.Postgres(t)
	f := watchFixture{tg: tg, claimed: make(chan struct{}, 16), got: make(chan core.Event, 16)}
	st := countingStore{Store: tg.Store, claimed: f.claimed}
	var err error
	f.poller, err = poller.New(poller.Config{
		Store: st, DB: tg.Reopen(t), Handler: chanHandler{f.got}, Owner: "watcher",
		Interval: time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.writer, err = core.NewWriter(core.WriterConfig{Store: tg.Store})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.poller.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.poller.Close(context.Background()) })
	// The first poll runs at Start. Once it has run and the watch is
	// subscribed, only the watch can make the poller claim again (the
	// interval is an hour). The watch's first wake-up may be served by
	// that first poll or by one more: either is right, so it is the
	// subscription the fixture waits for, not a count of claims.
	f.waitClaim(t)
	f.waitListening(t, 0)
	return f
}

// waitListening waits until one backend other than old is subscribed to the
// fixture's channel and idle (its LISTEN has taken effect), and returns it.
func (f watchFixture) waitListening(t *testing.T, old int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, pid := range f.listeners(t, "idle") {
			if pid != old {
				return pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no backend subscribed to the channel within 30s")
		}
		time.Sleep(10 * time.Millisecond) // polling the server's view; nothing to wait on
	}
}

func (f watchFixture) waitClaim(t *testing.T) {
	t.Helper()
	select {
	case <-f.claimed:
	case <-time.After(30 * time.Second):
		t.Fatal("the poller's first claim, at Start, did not come within 30s")
	}
}

// writePlain writes one event through WriteTx on a plain *sql.Tx, which has
// no after-commit hook: only a poller can deliver it.
func (f watchFixture) writePlain(t *testing.T, id string) {
	t.Helper()
	tx, err := f.tg.DB.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	env, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("Tested"), JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.writer.WriteTx(t.Context(), tx, env); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// expect waits for the event id, which must arrive long before the hour's
// poll: it is the watch that delivered it.
func (f watchFixture) expect(t *testing.T, id string) {
	t.Helper()
	select {
	case ev := <-f.got:
		if ev.ID() != id {
			t.Fatalf("claimed %s, want %s", ev.ID(), id)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s not claimed within 30s of its commit (the poll interval is an hour)", id)
	}
}

// listeners returns the backends listening on the fixture's channel (its
// name holds the table's, which is unique to the test), only those in state
// when state is not empty.
func (f watchFixture) listeners(t *testing.T, state string) []int {
	t.Helper()
	rows, err := f.tg.DB.QueryContext(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE query LIKE 'LISTEN %' AND strpos(query, $1) > 0
		   AND ($2 = '' OR state = $2)`, f.tg.Table, state)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return pids
}

// TestWatchPostgres: events written where no hot path delivers them reach
// another instance's poller at once, through NOTIFY and LISTEN; the watch
// survives the loss of its connection and ends with the poller.
func TestWatchPostgres(t *testing.T) {
	t.Parallel()
	t.Run("plain transaction", func(t *testing.T) {
		t.Parallel()
		f := newWatchFixture(t)
		for i := range 3 {
			id := fmt.Sprintf("plain-%d", i)
			f.writePlain(t, id)
			f.expect(t, id)
		}
	})
	t.Run("reconnects after its backend is killed", func(t *testing.T) {
		t.Parallel()
		f := newWatchFixture(t)
		pids := f.listeners(t, "")
		if len(pids) != 1 {
			t.Fatalf("listening backends = %v, want one", pids)
		}
		if _, err := f.tg.DB.ExecContext(t.Context(), `SELECT pg_terminate_backend($1)`, pids[0]); err != nil {
			t.Fatal(err)
		}
		// The watch subscribes again on a new backend, and what is
		// committed after that reaches the poller through it.
		f.waitListening(t, pids[0])
		f.writePlain(t, "after-kill")
		f.expect(t, "after-kill")
	})
	t.Run("Close stops the watch", func(t *testing.T) {
		t.Parallel()
		f := newWatchFixture(t)
		if err := f.poller.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		// The poller's goroutines are gone (goleak checks at the end); the
		// connection was closed, and the server ends its backend soon after.
		deadline := time.Now().Add(30 * time.Second)
		for len(f.listeners(t, "")) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("backend still listening 30s after Close: %v", f.listeners(t, ""))
			}
			time.Sleep(10 * time.Millisecond) // polling the server's view; nothing to wait on
		}
	})
}
