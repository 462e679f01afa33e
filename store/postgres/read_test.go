package postgres_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

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
