package storetest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// writeBackTests check the write-backs after a claim (MarkDone, MarkRetry,
// MarkDead) and their fencing by lease owner.
var writeBackTests = []test{
	{"MarkDoneRetryDead", testMarks},
	{"MarksNeverMoveTerminalRows", testTerminalRowsStay},
	{"Fencing", testFencing},
	{"LastErrorTruncated", testLastErrorTruncated},
}

func testMarks(t *testing.T, tg Target) {
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

func testTerminalRowsStay(t *testing.T, tg Target) {
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

func testFencing(t *testing.T, tg Target) {
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

func testLastErrorTruncated(t *testing.T, tg Target) {
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
