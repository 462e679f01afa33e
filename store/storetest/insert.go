package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// insertTests check Insert and Get: what goes in comes back, atomically.
var insertTests = []test{
	{"InsertAndGet", testInsertAndGet},
	{"InsertBatchChunked", testInsertBatchChunked},
	{"InsertLargePayloadsChunkedByBytes", testInsertLargePayloads},
	{"InsertDuplicate", testInsertDuplicate},
	{"InsertBatchIsAtomic", testInsertAtomic},
	{"InsertRolledBackLeavesNothing", testInsertRollback},
	{"PayloadRoundTrip", testPayloadRoundTrip},
	{"HeadersRoundTrip", testHeadersRoundTrip},
	{"TimestampsKeepMicroseconds", testTimestamps},
	{"InsertLeasedNotClaimableByOthers", testInsertLeased},
}

func testInsertAndGet(t *testing.T, tg Target) {
	e := env(t, "ins-1", base, func(s *core.EnvelopeSpec) {
		s.AggregateType = core.AggregateName("Order")
		s.AggregateID = "o-42"
		s.TenantID = "tenant-7"
		s.NotBefore = base.Add(time.Minute)
	})
	insert(t, tg, e)
	got := get(t, tg, "ins-1")
	if got.Type() != "Tested" || got.AggregateType() != "Order" || got.AggregateID() != "o-42" || got.TenantID() != "tenant-7" {
		t.Errorf("fields: got type=%q agg=%q id=%q tenant=%q", got.Type(), got.AggregateType(), got.AggregateID(), got.TenantID())
	}
	if got.Status != core.StatusNew || got.Attempts != 0 || got.LockedBy != "" || !got.LockedAt.IsZero() || !got.DoneAt.IsZero() || got.LastError != "" {
		t.Errorf("state: %+v", got)
	}
	if !got.CreatedAt.Equal(base) || !got.OccurredAt().Equal(base) {
		t.Errorf("created_at = %v, want %v", got.CreatedAt, base)
	}
	if !got.AvailableAt.Equal(base.Add(time.Minute)) {
		t.Errorf("available_at = %v, want NotBefore %v", got.AvailableAt, base.Add(time.Minute))
	}
	plain := env(t, "ins-2", base)
	insert(t, tg, plain)
	if g := get(t, tg, "ins-2"); g.AggregateType() != core.GlobalAggregateName || g.AggregateID() != "" || g.Headers() != nil {
		t.Errorf("defaults: agg=%q id=%q headers=%v", g.AggregateType(), g.AggregateID(), g.Headers())
	}
	if _, err := tg.Store.Get(ctx(t), tg.DB, "missing"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("get missing: err = %v, want core.ErrNotFound", err)
	}
}

func testInsertBatchChunked(t *testing.T, tg Target) {
	const n = 2503 // more than one multi-row statement
	seq(t, tg, "batch", n)
	if got := count(t, tg, "status = 0"); got != n {
		t.Fatalf("rows = %d, want %d", got, n)
	}
}

func testInsertLargePayloads(t *testing.T, tg Target) {
	const n = 6 // 6 MiB: more than one statement's byte budget
	envs := make([]core.Envelope, n)
	for i := range n {
		p := bytes.Repeat([]byte{byte('a' + i)}, core.MaxPayloadBytes)
		envs[i] = env(t, fmt.Sprintf("big-%d", i), base, func(s *core.EnvelopeSpec) { s.JSON, s.Bytes = nil, p })
	}
	insert(t, tg, envs...)
	for i := range n {
		got := get(t, tg, fmt.Sprintf("big-%d", i)).Payload()
		if len(got) != core.MaxPayloadBytes || got[0] != byte('a'+i) || got[len(got)-1] != byte('a'+i) {
			t.Fatalf("payload %d: len %d", i, len(got))
		}
	}
}

func testInsertDuplicate(t *testing.T, tg Target) {
	insert(t, tg, env(t, "dup", base))
	err := tg.Store.Insert(ctx(t), tg.DB, []core.Envelope{env(t, "dup", base)}, core.InsertOptions{})
	if !errors.Is(err, core.ErrDuplicateEvent) {
		t.Fatalf("duplicate insert: err = %v, want ErrDuplicateEvent", err)
	}
	if got := count(t, tg, "event_id = 'dup'"); got != 1 {
		t.Fatalf("rows = %d, want 1", got)
	}
}

func testInsertRollback(t *testing.T, tg Target) {
	tx, err := tg.DB.BeginTx(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Store.Insert(ctx(t), tx, []core.Envelope{env(t, "rb", base)}, core.InsertOptions{}); err != nil {
		t.Fatalf("insert in tx: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := count(t, tg, "1 = 1"); got != 0 {
		t.Fatalf("rows after rollback = %d, want 0", got)
	}
	if evs := claim(t, tg, tg.DB, owner, time.Now(), 10); len(evs) != 0 {
		t.Fatalf("claimed %d rolled-back events", len(evs))
	}
}

func testPayloadRoundTrip(t *testing.T, tg Target) {
	binary := make([]byte, 256*4)
	for i := range binary {
		binary[i] = byte(i)
	}
	cases := map[string]func(*core.EnvelopeSpec){
		"json": func(s *core.EnvelopeSpec) {
			s.JSON = []byte(`{"name":"Zoë","emoji":"🎉","n":[1,2.5,null],"esc":"a\"b\\c\u0000"}`)
		},
		"binary":  func(s *core.EnvelopeSpec) { s.JSON, s.Bytes = nil, binary },
		"empty":   func(s *core.EnvelopeSpec) { s.JSON, s.Bytes = nil, []byte{} },
		"nonutf8": func(s *core.EnvelopeSpec) { s.JSON, s.Bytes = nil, []byte{0xff, 0xfe, 0x00, 0xc3} },
	}
	want := map[string][]byte{}
	for id, mod := range cases {
		e := env(t, id, base, mod)
		want[id] = e.Payload()
		insert(t, tg, e)
	}
	for id, w := range want {
		if got := get(t, tg, id).Payload(); !bytes.Equal(got, w) {
			t.Errorf("%s: payload %q, want %q", id, got, w)
		}
	}
}

func testHeadersRoundTrip(t *testing.T, tg Target) {
	h := map[string]string{"traceparent": "00-abc-def-01", "ünï": "cödé 🎉", "quote\"key": "v\nline", "empty": ""}
	insert(t, tg, env(t, "hdr", base, func(s *core.EnvelopeSpec) { s.Headers = h }))
	got := get(t, tg, "hdr").Headers()
	if len(got) != len(h) {
		t.Fatalf("headers = %v, want %v", got, h)
	}
	for k, v := range h {
		if got[k] != v {
			t.Errorf("header %q = %q, want %q", k, got[k], v)
		}
	}
}

func testTimestamps(t *testing.T, tg Target) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.FixedZone("X", 3600))
	insert(t, tg, env(t, "ts", at))
	want := at.UTC().Truncate(time.Microsecond)
	got := get(t, tg, "ts")
	if !got.CreatedAt.Equal(want) || got.CreatedAt.Location() != time.UTC {
		t.Fatalf("created_at = %v, want %v (UTC, microseconds)", got.CreatedAt, want)
	}
	// One microsecond apart must still order correctly.
	insert(t, tg, env(t, "ts-b", want.Add(-time.Microsecond)))
	evs := claim(t, tg, tg.DB, owner, time.Now(), 10)
	if !slices.Equal(ids(evs), []string{"ts-b", "ts"}) {
		t.Fatalf("order = %v, want [ts-b ts]", ids(evs))
	}
}

func testInsertLeased(t *testing.T, tg Target) {
	now := time.Now()
	err := tg.Store.Insert(ctx(t), tg.DB, []core.Envelope{env(t, "hot", base)}, core.InsertOptions{LeaseOwner: owner, LeaseAt: now})
	if err != nil {
		t.Fatal(err)
	}
	if got := get(t, tg, "hot"); got.LockedBy != owner || !got.LockedAt.Equal(now.UTC().Truncate(time.Microsecond)) {
		t.Fatalf("lease = %q at %v", got.LockedBy, got.LockedAt)
	}
	if got := claim(t, tg, tg.DB, "other", now, 10); len(got) != 0 {
		t.Fatalf("another owner claimed a hot event: %v", ids(got))
	}
	if ok, err := tg.Store.MarkDone(ctx(t), tg.DB, owner, "hot", now); err != nil || !ok {
		t.Fatalf("mark done by inserting owner: %v %v", ok, err)
	}
}
