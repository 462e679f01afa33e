// Package storetest is the conformance suite every outbox store passes. A
// store's tests call Run with a function that opens a fresh target; the suite
// then checks, against the real database, everything core.Store promises.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// Open returns a target with a fresh, empty outbox table.
type Open func(t testing.TB) testdb.Target

// Run runs the conformance suite.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		fn   func(*testing.T, testdb.Target)
	}{
		{"InsertAndGet", testInsertAndGet},
		{"InsertBatchChunked", testInsertBatchChunked},
		{"InsertLargePayloadsChunkedByBytes", testInsertLargePayloads},
		{"InsertDuplicate", testInsertDuplicate},
		{"InsertBatchIsAtomic", testInsertAtomic},
		{"InsertRolledBackLeavesNothing", testInsertRollback},
		{"PayloadRoundTrip", testPayloadRoundTrip},
		{"HeadersRoundTrip", testHeadersRoundTrip},
		{"TimestampsKeepMicroseconds", testTimestamps},
		{"ClaimOrderAndLimit", testClaimOrderAndLimit},
		{"ClaimRespectsAvailableAt", testClaimAvailableAt},
		{"ClaimSkipRecent", testClaimSkipRecent},
		{"ClaimLeaseExpiry", testClaimLeaseExpiry},
		{"ClaimRejectsBadParams", testClaimBadParams},
		{"InsertLeasedNotClaimableByOthers", testInsertLeased},
		{"Release", testRelease},
		{"MarkDoneRetryDead", testMarks},
		{"MarksNeverMoveTerminalRows", testTerminalRowsStay},
		{"Fencing", testFencing},
		{"MarkDoneBatch", testMarkDoneBatch},
		{"DeleteDoneBatch", testDeleteDoneBatch},
		{"LastErrorTruncated", testLastErrorTruncated},
		{"ClaimReportsUndecodableRows", testUndecodable},
		{"ConcurrentClaimersDisjoint", testConcurrentClaimers},
		{"DeadQueryCountReplay", testDead},
		{"DeadReplayAllInBatches", testDeadReplayAll},
		{"Purge", testPurge},
		{"BadTableNames", testBadTableNames},
		{"CreateSchemaIdempotent", testCreateSchemaIdempotent},
		{"Stats", testStats},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, open(t))
		})
	}
}

// base is a fixed point three days in the past, so tests control every
// time: rows are created at base and later, before the times tests mark them
// DONE or DEAD ("48 hours ago" at the earliest), as rows become terminal
// after they are created (the MySQL purge relies on it).
var base = time.Now().UTC().Add(-72 * time.Hour).Truncate(time.Second)

const owner = "owner-a"

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func env(t testing.TB, id string, at time.Time, mods ...func(*core.EnvelopeSpec)) core.Envelope {
	t.Helper()
	spec := core.EnvelopeSpec{ID: id, Type: core.EventName("Tested"), OccurredAt: at, JSON: []byte(`{"n":1}`)}
	for _, m := range mods {
		m(&spec)
	}
	e, err := core.NewEnvelope(spec)
	if err != nil {
		t.Fatalf("new envelope: %v", err)
	}
	return e
}

func insert(t testing.TB, tg testdb.Target, envs ...core.Envelope) {
	t.Helper()
	if err := tg.Store.Insert(ctx(t), tg.DB, envs, core.InsertOptions{}); err != nil {
		t.Fatalf("insert: %v", err)
	}
}

// seq inserts n events created one millisecond apart from base.
func seq(t testing.TB, tg testdb.Target, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	envs := make([]core.Envelope, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
		envs[i] = env(t, ids[i], base.Add(time.Duration(i)*time.Millisecond))
	}
	insert(t, tg, envs...)
	return ids
}

func get(t testing.TB, tg testdb.Target, id string) core.Event {
	t.Helper()
	ev, err := tg.Store.Get(ctx(t), tg.DB, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return ev
}

func claim(t testing.TB, tg testdb.Target, db core.DBTX, who string, now time.Time, limit int) []core.Event {
	t.Helper()
	evs, bad, err := tg.Store.Claim(ctx(t), db, core.ClaimParams{Owner: who, Now: now, LeaseTimeout: time.Minute, Limit: limit})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(bad) > 0 {
		t.Fatalf("claim: undecodable rows: %v", bad)
	}
	return evs
}

func ids(evs []core.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID()
	}
	return out
}

func count(t testing.TB, tg testdb.Target, where string) int {
	t.Helper()
	var n int
	if err := tg.DB.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM "+tg.Table+" WHERE "+where).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", where, err)
	}
	return n
}

func testInsertAndGet(t *testing.T, tg testdb.Target) {
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

func testInsertBatchChunked(t *testing.T, tg testdb.Target) {
	const n = 2503 // more than one multi-row statement
	seq(t, tg, "batch", n)
	if got := count(t, tg, "status = 0"); got != n {
		t.Fatalf("rows = %d, want %d", got, n)
	}
}

func testInsertLargePayloads(t *testing.T, tg testdb.Target) {
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

func testInsertDuplicate(t *testing.T, tg testdb.Target) {
	insert(t, tg, env(t, "dup", base))
	err := tg.Store.Insert(ctx(t), tg.DB, []core.Envelope{env(t, "dup", base)}, core.InsertOptions{})
	if !errors.Is(err, core.ErrDuplicateEvent) {
		t.Fatalf("duplicate insert: err = %v, want ErrDuplicateEvent", err)
	}
	if got := count(t, tg, "event_id = 'dup'"); got != 1 {
		t.Fatalf("rows = %d, want 1", got)
	}
}

func testInsertRollback(t *testing.T, tg testdb.Target) {
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

func testPayloadRoundTrip(t *testing.T, tg testdb.Target) {
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

func testHeadersRoundTrip(t *testing.T, tg testdb.Target) {
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

func testTimestamps(t *testing.T, tg testdb.Target) {
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

func testClaimOrderAndLimit(t *testing.T, tg testdb.Target) {
	// Same created_at: ties break on event_id. Inserted out of order.
	insert(t, tg, env(t, "c", base), env(t, "a", base), env(t, "b", base), env(t, "0-early", base.Add(-time.Second)))
	first := claim(t, tg, tg.DB, owner, time.Now(), 3)
	if !slices.Equal(ids(first), []string{"0-early", "a", "b"}) {
		t.Fatalf("first claim = %v, want [0-early a b]", ids(first))
	}
	for _, e := range first {
		if e.LockedBy != owner || e.LockedAt.IsZero() {
			t.Errorf("%s: lease %q %v not returned", e.ID(), e.LockedBy, e.LockedAt)
		}
	}
	second := claim(t, tg, tg.DB, "owner-b", time.Now(), 3)
	if !slices.Equal(ids(second), []string{"c"}) {
		t.Fatalf("second claim = %v, want [c]", ids(second))
	}
	if got := get(t, tg, "a"); got.LockedBy != owner {
		t.Errorf("stored lease = %q, want %q", got.LockedBy, owner)
	}
}

func testClaimAvailableAt(t *testing.T, tg testdb.Target) {
	now := time.Now()
	insert(t, tg, env(t, "now", base), env(t, "later", base, func(s *core.EnvelopeSpec) { s.NotBefore = now.Add(time.Hour) }))
	if got := ids(claim(t, tg, tg.DB, owner, now, 10)); !slices.Equal(got, []string{"now"}) {
		t.Fatalf("claim = %v, want [now]", got)
	}
	mustMark(t)(tg.Store.MarkDone(ctx(t), tg.DB, owner, "now", now))
	if got := ids(claim(t, tg, tg.DB, owner, now.Add(2*time.Hour), 10)); !slices.Equal(got, []string{"later"}) {
		t.Fatalf("claim an hour later = %v, want [later]", got)
	}
}

func testClaimSkipRecent(t *testing.T, tg testdb.Target) {
	now := time.Now()
	insert(t, tg, env(t, "old", now.Add(-time.Minute)), env(t, "recent", now.Add(-time.Second)))
	evs, _, err := tg.Store.Claim(ctx(t), tg.DB, core.ClaimParams{Owner: owner, Now: now, LeaseTimeout: time.Minute, SkipRecent: 10 * time.Second, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(evs), []string{"old"}) {
		t.Fatalf("claim = %v, want [old]", ids(evs))
	}
}

func testClaimLeaseExpiry(t *testing.T, tg testdb.Target) {
	seq(t, tg, "lease", 2)
	now := time.Now()
	claim(t, tg, tg.DB, owner, now, 2)
	if got := claim(t, tg, tg.DB, "owner-b", now.Add(30*time.Second), 10); len(got) != 0 {
		t.Fatalf("live leases were claimed: %v", ids(got))
	}
	got := claim(t, tg, tg.DB, "owner-b", now.Add(61*time.Second), 10)
	if len(got) != 2 || got[0].LockedBy != "owner-b" {
		t.Fatalf("expired leases: claimed %v", ids(got))
	}
}

func testClaimBadParams(t *testing.T, tg testdb.Target) {
	seq(t, tg, "bad", 1)
	for name, p := range map[string]core.ClaimParams{
		"no owner": {Limit: 1, LeaseTimeout: time.Minute},
		"no limit": {Owner: owner, LeaseTimeout: time.Minute},
		"no lease": {Owner: owner, Limit: 1},
	} {
		if _, _, err := tg.Store.Claim(ctx(t), tg.DB, p); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if got := count(t, tg, "locked_by IS NULL"); got != 1 {
		t.Fatalf("a rejected claim changed rows")
	}
}

func testInsertLeased(t *testing.T, tg testdb.Target) {
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

func testRelease(t *testing.T, tg testdb.Target) {
	seq(t, tg, "rel", 3)
	now := time.Now()
	claim(t, tg, tg.DB, owner, now, 3)
	n, err := tg.Store.Release(ctx(t), tg.DB, "someone-else", []string{"rel-00000"})
	if err != nil || n != 0 {
		t.Fatalf("release by non-owner: n=%d err=%v", n, err)
	}
	n, err = tg.Store.Release(ctx(t), tg.DB, owner, []string{"rel-00000", "rel-00001", "missing"})
	if err != nil || n != 2 {
		t.Fatalf("release: n=%d err=%v, want 2", n, err)
	}
	got := claim(t, tg, tg.DB, "owner-b", now, 10)
	if !slices.Equal(ids(got), []string{"rel-00000", "rel-00001"}) {
		t.Fatalf("after release claim = %v", ids(got))
	}
	if ev := get(t, tg, "rel-00000"); ev.Attempts != 0 || ev.Status != core.StatusNew {
		t.Fatalf("release counted an attempt: %+v", ev)
	}
}

func testMarks(t *testing.T, tg testdb.Target) {
	seq(t, tg, "m", 3)
	now := time.Now().UTC().Truncate(time.Microsecond)
	claim(t, tg, tg.DB, owner, now, 3)
	c := ctx(t)
	next := now.Add(time.Minute)
	if ok, err := tg.Store.MarkRetry(c, tg.DB, owner, "m-00000", next, "boom"); err != nil || !ok {
		t.Fatalf("mark retry: %v %v", ok, err)
	}
	ev := get(t, tg, "m-00000")
	if ev.Status != core.StatusRetry || ev.Attempts != 1 || ev.LastError != "boom" || !ev.AvailableAt.Equal(next) || ev.LockedBy != "" || !ev.LockedAt.IsZero() {
		t.Fatalf("after retry: %+v", ev)
	}
	// A second write-back by the same (no longer leasing) owner is a no-op.
	if ok, err := tg.Store.MarkRetry(c, tg.DB, owner, "m-00000", next, "again"); err != nil || ok {
		t.Fatalf("repeated retry: %v %v", ok, err)
	}
	if ok, err := tg.Store.MarkDone(c, tg.DB, owner, "m-00001", now); err != nil || !ok {
		t.Fatalf("mark done: %v %v", ok, err)
	}
	if ev := get(t, tg, "m-00001"); ev.Status != core.StatusDone || !ev.DoneAt.Equal(now) || ev.LockedBy != "" {
		t.Fatalf("after done: %+v", ev)
	}
	if ok, err := tg.Store.MarkDone(c, tg.DB, owner, "m-00001", now); err != nil || ok {
		t.Fatalf("repeated done: %v %v", ok, err)
	}
	if ok, err := tg.Store.MarkDead(c, tg.DB, owner, "m-00002", now, "fatal"); err != nil || !ok {
		t.Fatalf("mark dead: %v %v", ok, err)
	}
	if ev := get(t, tg, "m-00002"); ev.Status != core.StatusDead || ev.Attempts != 1 || ev.LastError != "fatal" || !ev.DoneAt.Equal(now) {
		t.Fatalf("after dead: %+v", ev)
	}
	// The retried row comes back once due, and its attempts keep counting.
	got := claim(t, tg, tg.DB, owner, next, 10)
	if !slices.Equal(ids(got), []string{"m-00000"}) || got[0].Attempts != 1 || got[0].LastError != "boom" {
		t.Fatalf("claim of retried row = %v", got)
	}
}

func testTerminalRowsStay(t *testing.T, tg testdb.Target) {
	seq(t, tg, "term", 2)
	now := time.Now()
	claim(t, tg, tg.DB, owner, now, 2)
	c := ctx(t)
	mustMark(t)(tg.Store.MarkDone(c, tg.DB, owner, "term-00000", now))
	mustMark(t)(tg.Store.MarkDead(c, tg.DB, owner, "term-00001", now, "x"))
	// Even a current lease holder cannot move a terminal row; simulate one.
	if _, err := tg.DB.ExecContext(c, "UPDATE "+tg.Table+" SET locked_by = 'owner-a'"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"term-00000", "term-00001"} {
		before := get(t, tg, id)
		for name, f := range map[string]func() (bool, error){
			"done":  func() (bool, error) { return tg.Store.MarkDone(c, tg.DB, owner, id, now) },
			"retry": func() (bool, error) { return tg.Store.MarkRetry(c, tg.DB, owner, id, now, "y") },
			"dead":  func() (bool, error) { return tg.Store.MarkDead(c, tg.DB, owner, id, now, "z") },
		} {
			if ok, err := f(); err != nil || ok {
				t.Errorf("%s on terminal %s: changed=%v err=%v", name, id, ok, err)
			}
		}
		after := get(t, tg, id)
		if after.Status != before.Status || after.Attempts != before.Attempts || after.LastError != before.LastError {
			t.Errorf("%s moved: %v/%d/%q -> %v/%d/%q", id, before.Status, before.Attempts, before.LastError, after.Status, after.Attempts, after.LastError)
		}
	}
	if got := claim(t, tg, tg.DB, "owner-b", now.Add(time.Hour), 10); len(got) != 0 {
		t.Fatalf("terminal rows claimed: %v", ids(got))
	}
}

// mustMark fails the test unless the write-back it receives changed the row:
// mustMark(t)(store.MarkDone(...)).
func mustMark(t testing.TB) func(ok bool, err error) {
	t.Helper()
	return func(ok bool, err error) {
		t.Helper()
		if err != nil || !ok {
			t.Fatalf("mark: changed=%v err=%v", ok, err)
		}
	}
}

func testFencing(t *testing.T, tg testdb.Target) {
	seq(t, tg, "fence", 1)
	now := time.Now()
	c := ctx(t)
	claim(t, tg, tg.DB, "stale", now, 1)
	// The lease expires; another owner reclaims.
	later := now.Add(2 * time.Minute)
	if got := claim(t, tg, tg.DB, "fresh", later, 1); len(got) != 1 {
		t.Fatalf("reclaim after expiry got %d", len(got))
	}
	for name, f := range map[string]func() (bool, error){
		"done":  func() (bool, error) { return tg.Store.MarkDone(c, tg.DB, "stale", "fence-00000", later) },
		"retry": func() (bool, error) { return tg.Store.MarkRetry(c, tg.DB, "stale", "fence-00000", later, "stale") },
		"dead":  func() (bool, error) { return tg.Store.MarkDead(c, tg.DB, "stale", "fence-00000", later, "stale") },
	} {
		if ok, err := f(); err != nil || ok {
			t.Errorf("stale %s: changed=%v err=%v", name, ok, err)
		}
	}
	if n, err := tg.Store.Release(c, tg.DB, "stale", []string{"fence-00000"}); err != nil || n != 0 {
		t.Errorf("stale release: n=%d err=%v", n, err)
	}
	ev := get(t, tg, "fence-00000")
	if ev.Status != core.StatusNew || ev.LockedBy != "fresh" || ev.Attempts != 0 {
		t.Fatalf("stale owner changed the row: %+v", ev)
	}
	mustMark(t)(tg.Store.MarkDone(c, tg.DB, "fresh", "fence-00000", later))
}

func testLastErrorTruncated(t *testing.T, tg testdb.Target) {
	seq(t, tg, "trunc", 2)
	now := time.Now()
	claim(t, tg, tg.DB, owner, now, 2)
	long := strings.Repeat("é", core.MaxLastErrorLen) // 2 bytes per rune
	mustMark(t)(tg.Store.MarkRetry(ctx(t), tg.DB, owner, "trunc-00000", now, long))
	mustMark(t)(tg.Store.MarkDead(ctx(t), tg.DB, owner, "trunc-00001", now, "bad\x00byte \xff"+long))
	for _, id := range []string{"trunc-00000", "trunc-00001"} {
		got := get(t, tg, id).LastError
		if len(got) > core.MaxLastErrorLen || len(got) < core.MaxLastErrorLen-4 || !strings.HasSuffix(got, "é") {
			t.Errorf("%s: last_error has %d bytes (suffix %q)", id, len(got), got[len(got)-4:])
		}
	}
}

func testUndecodable(t *testing.T, tg testdb.Target) {
	seq(t, tg, "dec", 2)
	if _, err := tg.DB.ExecContext(ctx(t), "UPDATE "+tg.Table+" SET headers = 'not json' WHERE event_id = 'dec-00000'"); err != nil {
		t.Fatal(err)
	}
	evs, bad, err := tg.Store.Claim(ctx(t), tg.DB, core.ClaimParams{Owner: owner, Now: time.Now(), LeaseTimeout: time.Minute, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(evs), []string{"dec-00001"}) || len(bad) != 1 || bad[0].ID != "dec-00000" {
		t.Fatalf("events %v, bad %v", ids(evs), bad)
	}
	// The bad row is leased to us, so we can mark it dead.
	mustMark(t)(tg.Store.MarkDead(ctx(t), tg.DB, owner, "dec-00000", time.Now(), bad[0].Error()))
}

func testConcurrentClaimers(t *testing.T, tg testdb.Target) {
	const n, claimers, batch = 2000, 4, 25
	seq(t, tg, "cc", n)
	var (
		mu   sync.Mutex
		seen = map[string]string{}
		dups []error
		wg   sync.WaitGroup
		errs = make(chan error, claimers)
	)
	now := time.Now()
	for i := range claimers {
		db := tg.Reopen(t) // a separate pool, as another process has
		who := fmt.Sprintf("claimer-%d", i)
		wg.Go(func() {
			for {
				evs, _, err := tg.Store.Claim(ctx(t), db, core.ClaimParams{Owner: who, Now: now, LeaseTimeout: time.Hour, Limit: batch})
				if err != nil {
					errs <- fmt.Errorf("%s: %w", who, err)
					return
				}
				if len(evs) == 0 {
					return
				}
				mu.Lock()
				for _, e := range evs {
					if prev, dup := seen[e.ID()]; dup {
						dups = append(dups, fmt.Errorf("%s claimed by %s and %s", e.ID(), prev, who))
					}
					seen[e.ID()] = who
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, err := range dups {
		t.Error(err)
	}
	if len(seen) != n {
		t.Fatalf("claimed %d distinct events, want %d", len(seen), n)
	}
}

func deadRows(t testing.TB, tg testdb.Target, prefix string, n int, mod func(i int, s *core.EnvelopeSpec)) []string {
	t.Helper()
	envs := make([]core.Envelope, n)
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
		envs[i] = env(t, out[i], base.Add(time.Duration(i)*time.Millisecond), func(s *core.EnvelopeSpec) {
			if mod != nil {
				mod(i, s)
			}
		})
	}
	insert(t, tg, envs...)
	now := time.Now()
	evs := claim(t, tg, tg.DB, owner, now, n)
	for _, e := range evs {
		mustMark(t)(tg.Store.MarkDead(ctx(t), tg.DB, owner, e.ID(), now, "died"))
	}
	return out
}

func testDead(t *testing.T, tg testdb.Target) {
	c := ctx(t)
	dead := deadRows(t, tg, "dead", 6, func(i int, s *core.EnvelopeSpec) {
		if i%2 == 1 {
			s.Type = core.EventName("Other")
		}
		if i >= 4 {
			s.AggregateType = core.AggregateName("Order")
		}
	})
	seq(t, tg, "alive", 2)
	all, err := tg.Store.QueryDead(c, tg.DB, core.DeadFilter{})
	if err != nil || !slices.Equal(ids(all), dead) {
		t.Fatalf("query dead = %v (%v), want %v", ids(all), err, dead)
	}
	if all[0].LastError != "died" || all[0].Status != core.StatusDead {
		t.Errorf("dead row: %+v", all[0])
	}
	other, _ := tg.Store.QueryDead(c, tg.DB, core.DeadFilter{EventType: "Other", Limit: 2})
	if !slices.Equal(ids(other), []string{"dead-001", "dead-003"}) {
		t.Errorf("filtered+limited = %v", ids(other))
	}
	orders, _ := tg.Store.QueryDead(c, tg.DB, core.DeadFilter{AggregateType: "Order", EventType: "Tested"})
	if !slices.Equal(ids(orders), []string{"dead-004"}) {
		t.Errorf("by aggregate and type = %v", ids(orders))
	}
	for f, want := range map[core.DeadFilter]int64{{}: 6, {EventType: "Other"}: 3, {AggregateType: "Order"}: 2, {EventType: "None"}: 0} {
		if n, err := tg.Store.CountDead(c, tg.DB, f); err != nil || n != want {
			t.Errorf("count %+v = %d (%v), want %d", f, n, err, want)
		}
	}
	now := time.Now()
	n, err := tg.Store.ReplayDead(c, tg.DB, []string{"dead-000", "alive-00000", "missing"}, now)
	if err != nil || n != 1 {
		t.Fatalf("replay: n=%d err=%v, want 1", n, err)
	}
	ev := get(t, tg, "dead-000")
	if ev.Status != core.StatusNew || ev.Attempts != 0 || ev.LastError != "" || !ev.DoneAt.IsZero() {
		t.Fatalf("replayed row: %+v", ev)
	}
	if alive := get(t, tg, "alive-00000"); alive.Status != core.StatusNew {
		t.Fatalf("replay touched a live row: %+v", alive)
	}
	got := claim(t, tg, tg.DB, owner, now, 10)
	if !slices.Contains(ids(got), "dead-000") {
		t.Fatalf("replayed event not claimable: %v", ids(got))
	}
}

func testDeadReplayAll(t *testing.T, tg testdb.Target) {
	c := ctx(t)
	deadRows(t, tg, "ra", 7, func(i int, s *core.EnvelopeSpec) {
		if i == 6 {
			s.Type = core.EventName("Kept")
		}
	})
	now := time.Now()
	var total int64
	for {
		n, err := tg.Store.ReplayDeadBatch(c, tg.DB, core.DeadFilter{EventType: "Tested"}, 4, now)
		if err != nil {
			t.Fatal(err)
		}
		if n > 4 {
			t.Fatalf("batch replayed %d > 4", n)
		}
		total += n
		if n < 4 {
			break
		}
	}
	if total != 6 {
		t.Fatalf("replayed %d, want 6", total)
	}
	if n, _ := tg.Store.CountDead(c, tg.DB, core.DeadFilter{}); n != 1 {
		t.Fatalf("dead left = %d, want 1 (the filtered-out one)", n)
	}
	if _, err := tg.Store.ReplayDeadBatch(c, tg.DB, core.DeadFilter{}, 0, now); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("batch 0: err = %v", err)
	}
}

func testPurge(t *testing.T, tg testdb.Target) {
	c := ctx(t)
	seq(t, tg, "p", 12)
	old := time.Now().Add(-48 * time.Hour)
	recent := time.Now().Add(-time.Minute)
	claim(t, tg, tg.DB, owner, time.Now(), 10) // p-10, p-11 stay NEW
	for i := range 10 {
		id := fmt.Sprintf("p-%05d", i)
		at := old
		if i >= 6 {
			at = recent
		}
		switch {
		case i < 4 || i == 6:
			mustMark(t)(tg.Store.MarkDone(c, tg.DB, owner, id, at.Add(time.Duration(i)*time.Millisecond)))
		case i < 6 || i == 7:
			mustMark(t)(tg.Store.MarkDead(c, tg.DB, owner, id, at, "x"))
		case i == 8:
			mustMark(t)(tg.Store.MarkRetry(c, tg.DB, owner, id, at, "x"))
		}
	}
	// Now: old DONE p0-p3, old DEAD p4-p5, recent DONE p6, recent DEAD p7,
	// RETRY p8, leased NEW p9, NEW p10-p11.
	cutoff := time.Now().Add(-24 * time.Hour)
	n, err := tg.Store.Purge(c, tg.DB, core.PurgeParams{DoneBefore: cutoff, Limit: 3})
	if err != nil || n != 3 {
		t.Fatalf("first batch: n=%d err=%v, want 3", n, err)
	}
	if count(t, tg, "event_id = 'p-00000'") != 0 {
		t.Errorf("oldest DONE row not purged first")
	}
	n, _ = tg.Store.Purge(c, tg.DB, core.PurgeParams{DoneBefore: cutoff, Limit: 3})
	if n != 1 {
		t.Fatalf("second batch: n=%d, want 1 (short batch)", n)
	}
	if count(t, tg, "status = 3") != 3 {
		t.Fatalf("DEAD rows purged while DeadBefore was zero")
	}
	n, _ = tg.Store.Purge(c, tg.DB, core.PurgeParams{DoneBefore: cutoff, DeadBefore: cutoff, Limit: 100})
	if n != 2 {
		t.Fatalf("dead purge: n=%d, want 2", n)
	}
	want := []string{"p-00006", "p-00007", "p-00008", "p-00009", "p-00010", "p-00011"}
	rows, err := tg.DB.QueryContext(c, "SELECT event_id FROM "+tg.Table+" ORDER BY event_id")
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		left = append(left, id)
	}
	_ = rows.Close()
	if !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
	if n, err := tg.Store.Purge(c, tg.DB, core.PurgeParams{DoneBefore: cutoff}); !errors.Is(err, core.ErrInvalid) || n != 0 {
		t.Fatalf("limit 0: n=%d err=%v", n, err)
	}
}

// BadTableNames are names every store must reject.
var BadTableNames = []string{
	`outbox"; DROP TABLE users; --`,
	"outbox; DELETE FROM outbox_event",
	"outbox/**/x",
	"outbox -- comment",
	"out box",
	"`outbox`",
	"'outbox'",
	"1outbox",
	"outbox.event.extra",
	".outbox",
	"outbox.",
	"ou\x00tbox",
	"outbøx",
	strings.Repeat("x", 64),
}

func testBadTableNames(t *testing.T, tg testdb.Target) {
	for _, name := range BadTableNames {
		if _, err := tg.NewStore(name); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("table %q: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := tg.NewStore(strings.Repeat("x", 63)); err != nil {
		t.Errorf("63-char name rejected: %v", err)
	}
	if st, err := tg.NewStore(""); err != nil || st.Table() != "outbox_event" {
		t.Errorf("default name: %v %v", st, err)
	}
}

func testCreateSchemaIdempotent(t *testing.T, tg testdb.Target) {
	seq(t, tg, "idem", 1)
	if err := tg.Store.CreateSchema(ctx(t), tg.DB); err != nil {
		t.Fatalf("second CreateSchema: %v", err)
	}
	if count(t, tg, "1 = 1") != 1 {
		t.Fatalf("CreateSchema lost rows")
	}
}
