package storetest

import (
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// batchTests check the optional DONE batches: core.BatchMarker and core.DoneDeleter.
var batchTests = []test{
	{"MarkDoneBatch", testMarkDoneBatch},
	{"DeleteDoneBatch", testDeleteDoneBatch},
}

// testMarkDoneBatch checks core.BatchMarker: many rows DONE in one call,
// fenced by owner like MarkDone, terminal rows never moved, unknown and
// repeated ids harmless, and lists longer than one statement's chunk.
func testMarkDoneBatch(t *testing.T, tg Target) {
	bm, ok := core.StoreAs[core.BatchMarker](tg.Store)
	if !ok {
		t.Skipf("%T does not implement core.BatchMarker", tg.Store)
	}
	c := ctx(t)
	f := newBatchFixture(t, tg, "mdb")
	all, dead, lost, retried, now, n := f.all, f.dead, f.lost, f.retried, f.now, len(f.all)
	if k, err := bm.MarkDoneBatch(c, tg.DB, owner, nil, now); err != nil || k != 0 {
		t.Fatalf("empty batch: n=%d err=%v", k, err)
	}
	doneAt := now.Add(time.Minute)
	batch := append(append([]string(nil), all...), "missing", all[5])
	k, err := bm.MarkDoneBatch(c, tg.DB, owner, batch, doneAt)
	if err != nil || k != int64(n-2) {
		t.Fatalf("batch: n=%d err=%v, want %d", k, err, n-2)
	}
	if got := count(t, tg, "status = 1"); got != n-2 {
		t.Errorf("DONE rows = %d, want %d", got, n-2)
	}
	if got := count(t, tg, "status = 1 AND locked_by IS NULL AND locked_at IS NULL"); got != n-2 {
		t.Errorf("DONE rows with the lease cleared = %d, want %d", got, n-2)
	}
	for _, id := range []string{all[2], retried, all[n-1]} {
		ev := get(t, tg, id)
		if ev.Status != core.StatusDone || !ev.DoneAt.Equal(doneAt) || ev.LockedBy != "" {
			t.Errorf("%s after batch: status=%v done_at=%v locked_by=%q", id, ev.Status, ev.DoneAt, ev.LockedBy)
		}
	}
	if ev := get(t, tg, retried); ev.Attempts != 1 || ev.LastError != "again" {
		t.Errorf("retried row lost its history: attempts=%d last_error=%q", ev.Attempts, ev.LastError)
	}
	if ev := get(t, tg, dead); ev.Status != core.StatusDead || ev.LastError != "fatal" {
		t.Errorf("dead row moved: %v %q", ev.Status, ev.LastError)
	}
	if ev := get(t, tg, lost); ev.Status != core.StatusNew || ev.LockedBy != "owner-b" {
		t.Errorf("row leased by owner-b changed: %v locked_by=%q", ev.Status, ev.LockedBy)
	}
	// Idempotent: nothing is leased by owner any more.
	if k, err := bm.MarkDoneBatch(c, tg.DB, owner, all, doneAt); err != nil || k != 0 {
		t.Errorf("repeated batch: n=%d err=%v, want 0", k, err)
	}
	// The rightful owner still can.
	if k, err := bm.MarkDoneBatch(c, tg.DB, "owner-b", []string{lost, dead}, doneAt); err != nil || k != 1 {
		t.Errorf("owner-b batch: n=%d err=%v, want 1", k, err)
	}
}

// batchFixture is n claimed rows of which one went DEAD, one is leased by
// owner-b and one was retried and claimed again.
type batchFixture struct {
	all                 []string
	dead, lost, retried string
	now                 time.Time
}

func newBatchFixture(t *testing.T, tg Target, prefix string) batchFixture {
	t.Helper()
	c := ctx(t)
	const n = 1203 // more than one statement's worth of ids
	all := seq(t, tg, prefix, n)
	now := time.Now().UTC().Truncate(time.Microsecond)
	if got := claim(t, tg, tg.DB, owner, now, n); len(got) != n {
		t.Fatalf("claimed %d rows, want %d", len(got), n)
	}
	// One row goes DEAD (terminal), one is given back and leased by another
	// owner, one fails and is claimed again as RETRY.
	dead, lost, retried := all[10], all[0], all[1]
	mustMark(t)(tg.Store.MarkDead(c, tg.DB, owner, dead, now, "fatal"))
	if k, err := tg.Store.Release(c, tg.DB, owner, []string{lost}); err != nil || k != 1 {
		t.Fatalf("release: %d %v", k, err)
	}
	if got := claim(t, tg, tg.DB, "owner-b", now, 1); len(got) != 1 || got[0].ID() != lost {
		t.Fatalf("owner-b claimed %v, want [%s]", ids(got), lost)
	}
	mustMark(t)(tg.Store.MarkRetry(c, tg.DB, owner, retried, now, "again"))
	if got := claim(t, tg, tg.DB, owner, now.Add(time.Second), 1); len(got) != 1 || got[0].ID() != retried {
		t.Fatalf("reclaim of the retried row = %v", ids(got))
	}
	return batchFixture{all: all, dead: dead, lost: lost, retried: retried, now: now}
}

// testDeleteDoneBatch checks core.DoneDeleter: many delivered rows deleted in
// one call, fenced by owner like MarkDoneBatch, terminal rows never touched,
// unknown and repeated ids harmless, lists longer than one statement's chunk.
func testDeleteDoneBatch(t *testing.T, tg Target) {
	dd, ok := core.StoreAs[core.DoneDeleter](tg.Store)
	if !ok {
		t.Skipf("%T does not implement core.DoneDeleter", tg.Store)
	}
	c := ctx(t)
	f := newBatchFixture(t, tg, "ddb")
	n := len(f.all)
	if k, err := dd.DeleteDoneBatch(c, tg.DB, owner, nil); err != nil || k != 0 {
		t.Fatalf("empty batch: n=%d err=%v", k, err)
	}
	batch := append(append([]string(nil), f.all...), "missing", f.all[5])
	k, err := dd.DeleteDoneBatch(c, tg.DB, owner, batch)
	if err != nil || k != int64(n-2) {
		t.Fatalf("batch: n=%d err=%v, want %d", k, err, n-2)
	}
	if got := count(t, tg, "1 = 1"); got != 2 {
		t.Errorf("%d rows left, want 2 (the DEAD one and the one owner-b holds)", got)
	}
	if ev := get(t, tg, f.dead); ev.Status != core.StatusDead || ev.LastError != "fatal" {
		t.Errorf("dead row changed: %v %q", ev.Status, ev.LastError)
	}
	if ev := get(t, tg, f.lost); ev.Status != core.StatusNew || ev.LockedBy != "owner-b" {
		t.Errorf("row leased by owner-b changed: %v locked_by=%q", ev.Status, ev.LockedBy)
	}
	if k, err := dd.DeleteDoneBatch(c, tg.DB, owner, f.all); err != nil || k != 0 {
		t.Errorf("repeated batch: n=%d err=%v, want 0", k, err)
	}
	if k, err := dd.DeleteDoneBatch(c, tg.DB, "owner-b", []string{f.lost, f.dead}); err != nil || k != 1 {
		t.Errorf("owner-b batch: n=%d err=%v, want 1", k, err)
	}
}
