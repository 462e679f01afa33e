package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/inbox"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// newInbox returns an inbox for consumer on a fresh table, plus a fresh
// effects table the handlers write to; both are dropped when the test ends.
func newInbox(t *testing.T, tg testdb.Target, cfg inbox.Config) (*inbox.Inbox, string) {
	t.Helper()
	ctx := context.Background()
	cfg.DB = tg.DB
	if cfg.Table == "" {
		cfg.Table = testdb.UniqueName("inbox")
	}
	ib, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.CreateSchema(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ib.CreateSchema(ctx); err != nil {
		t.Fatalf("CreateSchema is not idempotent: %v", err)
	}
	effects := testdb.UniqueName("effects")
	if _, err := tg.DB.ExecContext(ctx, `CREATE TABLE `+effects+` (event_id VARCHAR(128) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, table := range []string{cfg.Table, effects} {
			if _, err := tg.DB.ExecContext(ctx, `DROP TABLE IF EXISTS `+table); err != nil {
				t.Errorf("drop %s: %v", table, err)
			}
		}
	})
	return ib, effects
}

func insertEffect(effects, id string) func(ctx context.Context, tx *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+effects+` (event_id) VALUES ('`+id+`')`)
		return err
	}
}

func countEffects(t *testing.T, db *sql.DB, effects, id string) int {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM ` + effects + ` WHERE event_id = '` + id + `'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestProcessOnce(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		ib, effects := newInbox(t, tg, inbox.Config{Consumer: "billing"})
		for i, want := range []bool{true, false, false} {
			applied, err := ib.Process(ctx, "ev-1", insertEffect(effects, "ev-1"))
			if err != nil || applied != want {
				t.Fatalf("process %d: applied %v err %v, want %v", i, applied, err, want)
			}
		}
		if n := countEffects(t, tg.DB, effects, "ev-1"); n != 1 {
			t.Errorf("effect applied %d times", n)
		}
		if seen, err := ib.Seen(ctx, "ev-1"); err != nil || !seen {
			t.Errorf("Seen(ev-1) = %v, %v", seen, err)
		}
		if seen, err := ib.Seen(ctx, "ev-2"); err != nil || seen {
			t.Errorf("Seen(ev-2) = %v, %v", seen, err)
		}
		// Another consumer of the same event handles it once too.
		other, err := inbox.New(inbox.Config{DB: tg.DB, Consumer: "shipping", Table: ib.Table()})
		if err != nil {
			t.Fatal(err)
		}
		if applied, err := other.Process(ctx, "ev-1", insertEffect(effects, "ev-1")); err != nil || !applied {
			t.Errorf("second consumer: applied %v err %v", applied, err)
		}
	})
}

// A failing handler rolls back its changes and the record: the redelivery
// runs it again.
func TestProcessFailureNotRecorded(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		ib, effects := newInbox(t, tg, inbox.Config{Consumer: "billing"})
		boom := errors.New("boom")
		applied, err := ib.Process(ctx, "ev-1", func(ctx context.Context, tx *sql.Tx) error {
			if err := insertEffect(effects, "ev-1")(ctx, tx); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) || applied {
			t.Fatalf("failing handler: applied %v err %v", applied, err)
		}
		if n := countEffects(t, tg.DB, effects, "ev-1"); n != 0 {
			t.Fatalf("rolled-back effect visible %d times", n)
		}
		if applied, err := ib.Process(ctx, "ev-1", insertEffect(effects, "ev-1")); err != nil || !applied {
			t.Fatalf("redelivery: applied %v err %v", applied, err)
		}
		if n := countEffects(t, tg.DB, effects, "ev-1"); n != 1 {
			t.Errorf("effect applied %d times", n)
		}
	})
}

// Redeliveries of one id handled at the same time by several goroutines
// (several consumer processes would be the same) take effect once.
func TestProcessConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ib, effects := newInbox(t, tg, inbox.Config{Consumer: "billing"})
		const ids, copies = 20, 4
		var wg sync.WaitGroup
		var mu sync.Mutex
		applied := map[string]int{}
		for i := range ids {
			id := fmt.Sprintf("ev-%d", i)
			for range copies {
				wg.Go(func() {
					ok, err := ib.Process(context.Background(), id, insertEffect(effects, id))
					if err != nil {
						t.Error(err)
						return
					}
					if ok {
						mu.Lock()
						applied[id]++
						mu.Unlock()
					}
				})
			}
		}
		wg.Wait()
		for i := range ids {
			id := fmt.Sprintf("ev-%d", i)
			if applied[id] != 1 || countEffects(t, tg.DB, effects, id) != 1 {
				t.Errorf("%s: applied %d, effects %d", id, applied[id], countEffects(t, tg.DB, effects, id))
			}
		}
	})
}

// Record works inside a transaction of the caller's.
func TestRecordInCallersTx(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		ib, _ := newInbox(t, tg, inbox.Config{Consumer: "billing"})
		tx, err := tg.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		first, err := ib.Record(ctx, tx, "ev-1")
		if err != nil || !first {
			t.Fatalf("first record: %v %v", first, err)
		}
		again, err := ib.Record(ctx, tx, "ev-1")
		if err != nil || again {
			t.Fatalf("second record in the same tx: %v %v", again, err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if seen, _ := ib.Seen(ctx, "ev-1"); seen {
			t.Error("a rolled-back record is seen")
		}
		if _, err := ib.Record(ctx, tg.DB, strings.Repeat("x", inbox.MaxEventIDLen+1)); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("over-long id: %v", err)
		}
		if _, err := ib.Record(ctx, tg.DB, ""); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("empty id: %v", err)
		}
	})
}

func TestPurge(t *testing.T) {
	t.Parallel()
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		clock := func() time.Time { return now }
		ib, _ := newInbox(t, tg, inbox.Config{Consumer: "billing", PurgeBatch: 2, Now: clock})
		other, err := inbox.New(inbox.Config{DB: tg.DB, Consumer: "shipping", Table: ib.Table(), Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		record := func(ib *inbox.Inbox, id string) {
			if _, err := ib.Record(ctx, tg.DB, id); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			record(ib, fmt.Sprintf("old-%d", i))
		}
		record(other, "old-other")
		now = now.Add(48 * time.Hour)
		record(ib, "new-1")
		n, err := ib.Purge(ctx, now.Add(-24*time.Hour))
		if err != nil || n != 5 {
			t.Fatalf("purge: %d, %v; want 5", n, err)
		}
		for id, want := range map[string]bool{"old-0": false, "old-4": false, "new-1": true} {
			if seen, _ := ib.Seen(ctx, id); seen != want {
				t.Errorf("after purge, Seen(%s) = %v", id, seen)
			}
		}
		if seen, _ := other.Seen(ctx, "old-other"); !seen {
			t.Error("purge deleted another consumer's entry")
		}
	})
}

func TestNewValidates(t *testing.T) {
	tg := testdb.SQLite(t)
	for name, cfg := range map[string]inbox.Config{
		"no db":          {Consumer: "c"},
		"no consumer":    {DB: tg.DB},
		"blank consumer": {DB: tg.DB, Consumer: "  "},
		"bad table":      {DB: tg.DB, Consumer: "c", Table: "inbox; DROP TABLE x"},
		"bad dialect":    {DB: tg.DB, Consumer: "c", Dialect: "oracle"},
		"negative batch": {DB: tg.DB, Consumer: "c", PurgeBatch: -1},
	} {
		if _, err := inbox.New(cfg); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	ib, err := inbox.New(inbox.Config{DB: tg.DB, Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ib.Process(context.Background(), "ev", nil); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("nil handler: %v", err)
	}
}
