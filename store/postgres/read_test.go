package postgres_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/internal/sqlstore"
	"github.com/outboxkit/outbox/store/postgres"
)

// The position read decodes the bytes the server sent when pgx asks for
// the forms it knows: this holds it to what pgx v5 and PostgreSQL send for
// the read's column types, NULLs included.
func TestReadRawForm(t *testing.T) {
	t.Parallel()
	pool := testdb.PgxPool(t)
	ctx := context.Background()
	at := time.Date(2026, 11, 27, 23, 59, 58, 123456000, time.UTC)
	rows, err := pool.Query(ctx, `SELECT $1::varchar, $2::varchar, 'Order'::varchar, NULL::varchar, 't-1'::varchar,
		'\x00ff'::bytea, NULL::text, $3::timestamptz, 42::bigint, 7::bigint`, "ev-1", "OrderPlaced", at)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	fds := rows.FieldDescriptions()
	if !postgres.RawForm(fds, true) || !postgres.RawForm(fds[:9], false) {
		t.Fatalf("the read's columns do not arrive in the forms the read decodes: %+v", fds)
	}
	if postgres.RawForm(fds, false) || postgres.RawForm(fds[:9], true) {
		t.Error("RawForm accepted a read with the token column missing or extra")
	}
	if !rows.Next() {
		t.Fatalf("no row: %v", rows.Err())
	}
	var r sqlstore.StreamRow
	var token int64
	if err := postgres.FromRaw(&r, rows.RawValues(), &token); err != nil {
		t.Fatal(err)
	}
	want := sqlstore.StreamRow{Pos: 42, ID: "ev-1", EventType: "OrderPlaced", AggregateType: "Order", TenantID: "t-1",
		Payload: []byte{0, 0xff}, CreatedAt: at}
	if r.Pos != want.Pos || r.ID != want.ID || r.EventType != want.EventType || r.AggregateType != want.AggregateType ||
		r.AggregateID != "" || r.TenantID != want.TenantID || r.Headers != "" || !bytes.Equal(r.Payload, want.Payload) ||
		!r.CreatedAt.Equal(at) || token != 7 {
		t.Errorf("decoded %+v token %d, want %+v token 7", r, token, want)
	}
}

func TestFromRawRejects(t *testing.T) {
	t.Parallel()
	be := func(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
	row := func(createdAt, pos []byte) [][]byte {
		return [][]byte{[]byte("ev-1"), []byte("T"), []byte("A"), nil, nil, []byte("p"), nil, createdAt, pos}
	}
	for _, tc := range []struct {
		name string
		vals [][]byte
		want string
	}{
		{"created_at NULL", row(nil, be(1)), "created_at: 0 bytes"},
		{"created_at in text form", row([]byte("2026-11-27"), be(1)), "created_at: 10 bytes"},
		{"created_at infinity", row(be(math.MaxInt64), be(1)), "infinite"},
		{"created_at -infinity", row(be(math.MinInt64), be(1)), "infinite"},
		{"pos NULL", row(be(0), nil), "pos: 0 bytes"},
		{"token NULL", append(row(be(0), be(1)), nil), "token: 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r sqlstore.StreamRow
			var token int64
			err := postgres.FromRaw(&r, tc.vals, &token)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	var r sqlstore.StreamRow
	var token int64
	if err := postgres.FromRaw(&r, row(be(0), be(9)), &token); err != nil || !r.CreatedAt.Equal(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)) || r.Pos != 9 {
		t.Errorf("FromRaw of a valid row: %v, created_at %v, pos %d; want 2000-01-01 and 9", err, r.CreatedAt, r.Pos)
	}
}

// The position reads run with PostgreSQL's generic plan, on a table never
// analyzed as on any other: no custom plan of theirs is made (a custom plan
// of a table without statistics scans and sorts the whole table), and the
// connection goes back to the pool as it came, outside a transaction and
// with the session's plan_cache_mode.
func TestReadGenericPlan(t *testing.T) {
	t.Parallel()
	tg := testdb.Postgres(t)
	tg.DB.SetMaxOpenConns(1) // every statement on the one session the test inspects
	ctx := context.Background()
	lg := position.LogOf(tg.Store)
	envs := make([]core.Envelope, 3)
	for i := range envs {
		e, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"), AggregateType: core.AggregateName("Order"),
			AggregateID: fmt.Sprintf("o-%d", i), JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		envs[i] = e
	}
	if _, err := lg.InsertStream(ctx, tg.DB, envs); err != nil {
		t.Fatal(err)
	}
	for range 7 { // past the five executions that would be planned for their parameters
		rows, _, err := lg.ReadAfter(ctx, tg.DB, 0, 10)
		if err != nil || len(rows) != len(envs) {
			t.Fatalf("ReadAfter: %d rows (%v), want %d", len(rows), err, len(envs))
		}
		keys, _, err := lg.ReadKeysAfter(ctx, tg.DB, 0, 10)
		if err != nil || len(keys) != len(envs) {
			t.Fatalf("ReadKeysAfter: %d rows (%v), want %d", len(keys), err, len(envs))
		}
		if got, err := lg.ReadRanges(ctx, tg.DB, []position.Range{{Lo: 1, Hi: 1 << 40}}); err != nil || len(got) != len(envs) {
			t.Fatalf("ReadRanges: %d rows (%v), want %d", len(got), err, len(envs))
		}
	}
	var generic, custom int
	if err := tg.DB.QueryRowContext(ctx, "SELECT COALESCE(SUM(generic_plans), 0), COALESCE(SUM(custom_plans), 0) "+
		"FROM pg_prepared_statements WHERE statement LIKE 'SELECT %' AND strpos(statement, $1) > 0 "+
		"AND strpos(statement, 'pg_prepared_statements') = 0", tg.Table).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	if custom != 0 || generic < 3*7 {
		t.Errorf("the reads were planned %d times for their parameters and %d times generically, want 0 and at least 21", custom, generic)
	}
	var mode string
	if err := tg.DB.QueryRowContext(ctx, "SHOW plan_cache_mode").Scan(&mode); err != nil || mode != "auto" {
		t.Errorf("the session's plan_cache_mode after the reads: %q (%v), want auto", mode, err)
	}
}

// A read that fails, in the query or in the caller's decoding, leaves the
// connection outside any transaction, with the session's plan_cache_mode.
func TestGenericReadFailureLeavesNoTransaction(t *testing.T) {
	t.Parallel()
	pool := testdb.PgxPool(t)
	ctx := context.Background()
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	drain := func(rows pgx.Rows) (bool, error) {
		for rows.Next() {
		}
		return true, rows.Err()
	}
	refuse := func(pgx.Rows) (bool, error) { return true, fmt.Errorf("undecodable") }
	for _, tc := range []struct {
		name, query string
		read        func(pgx.Rows) (bool, error)
		want        string
	}{
		{"query fails", "SELECT 1 / (random() > 2)::int", drain, "division by zero"},
		{"read fails", "SELECT 1", refuse, "undecodable"},
	} {
		_, err := postgres.GenericRead(ctx, c.Conn(), tc.query, nil, tc.read)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
		if st := c.Conn().PgConn().TxStatus(); st != 'I' {
			t.Errorf("%s: the connection is left in transaction state %q", tc.name, st)
		}
		var mode string
		if err := c.Conn().QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode); err != nil || mode != "auto" {
			t.Errorf("%s: plan_cache_mode afterwards %q (%v), want auto", tc.name, mode, err)
		}
	}
	taken, err := postgres.GenericRead(ctx, c.Conn(), "SELECT 1", nil, func(rows pgx.Rows) (bool, error) { return false, nil })
	if taken || err != nil || c.Conn().PgConn().TxStatus() != 'I' {
		t.Errorf("a read that leaves the rows: taken %v, error %v, state %q; want false, nil, idle", taken, err, c.Conn().PgConn().TxStatus())
	}
}
