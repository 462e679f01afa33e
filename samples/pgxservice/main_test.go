package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/core"
)

// queueCount counts the events queued on the hot and the cold queue.
type queueCount struct {
	core.NopMetrics
	hot, cold atomic.Int64
}

func (q *queueCount) HotEnqueued()  { q.hot.Add(1) }
func (q *queueCount) ColdEnqueued() { q.cold.Add(1) }

// TestRun runs the service on OUTBOX_POSTGRES_DSN: every order's event is
// delivered, through the hot path alone.
func TestRun(t *testing.T) {
	dsn := os.Getenv("OUTBOX_POSTGRES_DSN")
	if dsn == "" {
		if os.Getenv("OUTBOX_REQUIRE_DBS") == "1" {
			t.Fatal("OUTBOX_POSTGRES_DSN is unset")
		}
		t.Skip("PostgreSQL tests: set OUTBOX_POSTGRES_DSN=postgres://postgres@127.0.0.1:5432/test?sslmode=disable to run")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	cfg := config{dsn: dsn, orders: 3, outboxTable: "pgxsvc_outbox_" + suffix, ordersTable: "pgxsvc_orders_" + suffix, metrics: &queueCount{}}
	t.Cleanup(func() {
		ctx := context.Background()
		pool, err := pgxpool.New(ctx, dsn)
		if err != nil {
			t.Error(err)
			return
		}
		defer pool.Close()
		for _, table := range []string{cfg.outboxTable, cfg.outboxTable + "_key", cfg.ordersTable} {
			if _, err := pool.Exec(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
				t.Error(err)
			}
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, cfg, &out); err != nil {
		t.Fatal(err)
	}
	want := "delivered OrderPlaced o-1 {\"total_cents\":1250}\n" +
		"delivered OrderPlaced o-2 {\"total_cents\":2500}\n" +
		"delivered OrderPlaced o-3 {\"total_cents\":3750}\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	m := cfg.metrics.(*queueCount)
	if hot, cold := m.hot.Load(), m.cold.Load(); hot != 3 || cold != 0 {
		t.Errorf("hot/cold enqueued %d/%d, want 3/0: every event through the hot path", hot, cold)
	}
}

// TestNoDatabaseSQL keeps the service honest: its own code imports no
// database/sql.
func TestNoDatabaseSQL(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if filepath.Ext(name) != ".go" || len(name) > 8 && name[len(name)-8:] == "_test.go" {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "database/sql" || p == "database/sql/driver" {
				t.Errorf("%s imports %s", name, p)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no source file checked")
	}
}

// TestPageShowsMain: docs/integrations/pgx.md shows main.go as it is, so the
// page's example is one that runs.
func TestPageShowsMain(t *testing.T) {
	page, err := os.ReadFile("../../docs/integrations/pgx.md")
	if err != nil {
		t.Fatal(err)
	}
	main, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(page, []byte("```go\n"+string(main)+"```\n")) {
		t.Fatal("docs/integrations/pgx.md does not show samples/pgxservice/main.go as it is; copy the file into the page")
	}
}
