package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// purgeTests check the purge of old terminal rows (core.Purger).
var purgeTests = []test{
	{"Purge", testPurge},
}

func testPurge(t *testing.T, tg Target) {
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
