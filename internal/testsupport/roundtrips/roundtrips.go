// Package roundtrips records what a pgx connection sends to PostgreSQL, one
// entry per round trip, for tests that count them.
package roundtrips

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Recorder is a pgx tracer (pgx.ConnConfig.Tracer) that records what a
// connection sends, one entry per round trip: a statement alone, or a batch
// as its statements joined with " + ", in lower case with spaces
// collapsed. Statements pgx prepares before running them (the first run of
// a statement on a connection) add a round trip it does not record; tests
// run every statement once before they record. It records between Start
// and Want.
type Recorder struct {
	mu   sync.Mutex
	sent []string
	on   bool
}

func (r *Recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL)
	return ctx
}

func (r *Recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *Recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var sqls []string
	for _, q := range d.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	r.add(strings.Join(sqls, " + "))
	return ctx
}

func (r *Recorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *Recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *Recorder) add(sql string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.sent = append(r.sent, strings.ToLower(strings.Join(strings.Fields(sql), " ")))
	}
}

// Start forgets what was recorded and records from now on.
func (r *Recorder) Start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.sent = true, nil
}

// Stop stops recording and returns the round trips since Start.
func (r *Recorder) Stop() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.sent
}

// Want stops recording and fails t unless the round trips since Start
// were want.
func (r *Recorder) Want(t testing.TB, want ...string) {
	t.Helper()
	if sent := r.Stop(); fmt.Sprintf("%q", sent) != fmt.Sprintf("%q", want) {
		t.Errorf("round trips:\n got  %q\n want %q", sent, want)
	}
}
