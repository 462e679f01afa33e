package storetest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// Ordering is the ordering of Target.Ordered: events of aggregate type
// "Order" are ordered and a DEAD one blocks its key; events of "Ledger" are
// ordered and a DEAD one lets its key go on.
var Ordering = core.Ordering{"Order": core.DeadBlocks, "Ledger": core.DeadContinues}

// orderedTests check ordered delivery (core.OrderedStore) on Target.Ordered:
// sequence numbers follow write order and commit order, not clocks; only a
// key's head is claimable; finishing it promotes the next event leased by
// the finisher, fenced by the lease owner; RETRY keeps the key waiting;
// DEAD blocks or continues by policy; skip and replay unblock; concurrent
// writers and a finisher of one key lose nothing and keep seq order.
var orderedTests = []test{
	{"OrderedInsertTakesSeqs", testOrderedInsert},
	{"OrderedWithoutAggregateIDRefused", testOrderedNoAggregateID},
	{"OrderedWaitingNotClaimed", testWaitingNotClaimed},
	{"OrderedPromotionLeasedToFinisher", testPromotion},
	{"OrderedPromotionFenced", testPromotionFenced},
	{"OrderedRetryKeepsKeyWaiting", testOrderedRetry},
	{"OrderedDeadBlocksSkipAndReplay", testDeadBlocks},
	{"OrderedDeadContinues", testDeadContinues},
	{"OrderedSeqFollowsCommitNotClock", testSeqFollowsCommit},
	{"OrderedConcurrentWritersAndFinisher", testConcurrentOrdered},
	{"OrderedBatchAcrossKeys", testOrderedBatch},
	{"OrderedBatchRuns", testOrderedBatchRuns},
	{"OrderedDonePromotesOnlyWhereWaiting", testDonePromotesOnlyWhereWaiting},
	{"OrderedDoneBatchOfManyKeys", testDoneManyKeys},
	{"OrderedInsertFailsWhole", testOrderedInsertFails},
	{"OrderedPurgeKeys", testPurgeKeys},
}

func orderedStore(t *testing.T, tg Target) core.OrderedStore {
	t.Helper()
	if tg.Ordered == nil {
		t.Skip("storetest: Target.Ordered is nil")
	}
	o, ok := core.StoreAs[core.OrderedStore](tg.Ordered)
	if !ok {
		t.Fatalf("storetest: Target.Ordered %T does not implement core.OrderedStore", tg.Ordered)
	}
	return o
}

func keyed(aggType, aggID string) func(*core.EnvelopeSpec) {
	return func(s *core.EnvelopeSpec) { s.AggregateType, s.AggregateID = core.AggregateName(aggType), aggID }
}

// writeOrdered writes envs in one transaction of its own, leased by lease
// when not "", and returns the waiting ids.
func writeOrdered(t testing.TB, tg Target, st core.OrderedStore, lease string, envs ...core.Envelope) []string {
	t.Helper()
	c := ctx(t)
	tx, err := tg.DB.BeginTx(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	opts := core.InsertOptions{}
	if lease != "" {
		opts = core.InsertOptions{LeaseOwner: lease, LeaseAt: base}
	}
	res, err := st.InsertOrdered(c, tx, envs, opts)
	if err != nil {
		t.Fatalf("insert ordered: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return res.Waiting
}

func wantState(t testing.TB, tg Target, id string, status core.Status, seq int64, lockedBy string) {
	t.Helper()
	ev := get(t, tg, id)
	if ev.Status != status || ev.Seq != seq || ev.LockedBy != lockedBy {
		t.Fatalf("%s: status %v seq %d locked by %q; want %v seq %d locked by %q", id, ev.Status, ev.Seq, ev.LockedBy, status, seq, lockedBy)
	}
}

func testOrderedInsert(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	waiting := writeOrdered(t, tg, st, owner,
		env(t, "a-1", base, keyed("Order", "A")),
		env(t, "u-1", base, keyed("Other", "A")),
		env(t, "b-1", base, keyed("Order", "B")),
		env(t, "a-2", base.Add(-time.Hour), keyed("Order", "A")), // an earlier clock changes nothing
		env(t, "a-3", base, keyed("Order", "A")),
	)
	if want := []string{"a-2", "a-3"}; !slices.Equal(waiting, want) {
		t.Fatalf("waiting = %v, want %v", waiting, want)
	}
	wantState(t, tg, "a-1", core.StatusNew, 1, owner)
	wantState(t, tg, "a-2", core.StatusWaiting, 2, "")
	wantState(t, tg, "a-3", core.StatusWaiting, 3, "")
	wantState(t, tg, "b-1", core.StatusNew, 1, owner)
	wantState(t, tg, "u-1", core.StatusNew, 0, owner)
	// A second write of key A, all of whose events are unfinished: waiting.
	waiting = writeOrdered(t, tg, st, owner, env(t, "a-4", base, keyed("Order", "A")))
	if !slices.Equal(waiting, []string{"a-4"}) {
		t.Fatalf("waiting = %v, want [a-4]", waiting)
	}
	wantState(t, tg, "a-4", core.StatusWaiting, 4, "")
	// Through the plain Insert, on a pool: the same.
	if err := tg.Ordered.Insert(ctx(t), tg.DB, []core.Envelope{env(t, "c-1", base, keyed("Order", "C")), env(t, "c-2", base, keyed("Order", "C"))}, core.InsertOptions{}); err != nil {
		t.Fatal(err)
	}
	wantState(t, tg, "c-1", core.StatusNew, 1, "")
	wantState(t, tg, "c-2", core.StatusWaiting, 2, "")
	st2, err := inspector(t, tg.Ordered).Stats(ctx(t), tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	if st2.Waiting != 4 || st2.BlockedKeys != 0 || st2.New != 4 {
		t.Fatalf("stats: %+v; want 4 waiting, 4 new, 0 blocked keys", st2)
	}
}

func testOrderedNoAggregateID(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	_, err := st.InsertOrdered(ctx(t), tg.DB, []core.Envelope{
		env(t, "u-1", base),
		env(t, "a-1", base, keyed("Order", "")),
	}, core.InsertOptions{})
	if !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("ordered event without aggregate id: err = %v, want core.ErrInvalid", err)
	}
	if n := count(t, tg, "1 = 1"); n != 0 {
		t.Fatalf("%d rows written, want none", n)
	}
}

func testWaitingNotClaimed(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	writeOrdered(t, tg, st, "",
		env(t, "a-1", base, keyed("Order", "A")), env(t, "a-2", base, keyed("Order", "A")),
		env(t, "b-1", base, keyed("Order", "B")), env(t, "b-2", base, keyed("Order", "B")))
	got := ids(claim(t, tg, tg.DB, owner, time.Now(), 100))
	slices.Sort(got)
	if want := []string{"a-1", "b-1"}; !slices.Equal(got, want) {
		t.Fatalf("claimed %v, want only the heads %v", got, want)
	}
}

func testPromotion(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	writeOrdered(t, tg, st, "", env(t, "a-1", base, keyed("Order", "A")), env(t, "a-2", base, keyed("Order", "A")), env(t, "a-3", base, keyed("Order", "A")))
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i, id := range []string{"a-1", "a-2", "a-3"} {
		if i == 0 {
			if got := ids(claim(t, tg, tg.DB, owner, now, 10)); !slices.Equal(got, []string{"a-1"}) {
				t.Fatalf("claimed %v, want [a-1]", got)
			}
		}
		n, promoted, err := st.MarkDoneOrdered(ctx(t), tg.DB, owner, []string{id}, now)
		if err != nil || n != 1 {
			t.Fatalf("mark done %s: n=%d err=%v", id, n, err)
		}
		if i == 2 {
			if len(promoted) != 0 {
				t.Fatalf("last event promoted %v", ids(promoted))
			}
			break
		}
		next := fmt.Sprintf("a-%d", i+2)
		if len(promoted) != 1 || promoted[0].ID() != next || promoted[0].LockedBy != owner || promoted[0].Status != core.StatusNew || promoted[0].Seq != int64(i+2) {
			t.Fatalf("done %s promoted %+v, want %s leased by %s", id, promoted, next, owner)
		}
		wantState(t, tg, next, core.StatusNew, int64(i+2), owner)
		if got := claim(t, tg, tg.DB, "other", now, 10); len(got) != 0 {
			t.Fatalf("promoted event claimable by another owner: %v", ids(got))
		}
	}
	// The key is idle: its next write is its head.
	if w := writeOrdered(t, tg, st, "", env(t, "a-4", base, keyed("Order", "A"))); len(w) != 0 {
		t.Fatalf("write after the key finished: waiting %v", w)
	}
	wantState(t, tg, "a-4", core.StatusNew, 4, "")
}

func testPromotionFenced(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	writeOrdered(t, tg, st, owner, env(t, "a-1", base, keyed("Order", "A")), env(t, "a-2", base, keyed("Order", "A")))
	n, promoted, err := st.MarkDoneOrdered(ctx(t), tg.DB, "intruder", []string{"a-1"}, time.Now())
	if err != nil || n != 0 || len(promoted) != 0 {
		t.Fatalf("fenced done: n=%d promoted=%d err=%v; want nothing", n, len(promoted), err)
	}
	wantState(t, tg, "a-1", core.StatusNew, 1, owner)
	wantState(t, tg, "a-2", core.StatusWaiting, 2, "")
	ok, promoted, err := st.MarkDeadOrdered(ctx(t), tg.DB, "intruder", "a-1", time.Now(), "x")
	if err != nil || ok || len(promoted) != 0 {
		t.Fatalf("fenced dead: ok=%v promoted=%d err=%v; want nothing", ok, len(promoted), err)
	}
}

func testOrderedRetry(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	writeOrdered(t, tg, st, owner, env(t, "a-1", base, keyed("Order", "A")), env(t, "a-2", base, keyed("Order", "A")))
	now := time.Now().UTC().Truncate(time.Millisecond)
	if ok, err := tg.Ordered.MarkRetry(ctx(t), tg.DB, owner, "a-1", now.Add(time.Minute), "later"); err != nil || !ok {
		t.Fatalf("mark retry: %v %v", ok, err)
	}
	if got := claim(t, tg, tg.DB, owner, now, 10); len(got) != 0 {
		t.Fatalf("claimed %v during the head's backoff, want nothing", ids(got))
	}
	if got := ids(claim(t, tg, tg.DB, owner, now.Add(2*time.Minute), 10)); !slices.Equal(got, []string{"a-1"}) {
		t.Fatalf("claimed %v once due, want [a-1]", got)
	}
	wantState(t, tg, "a-2", core.StatusWaiting, 2, "")
}

func testDeadBlocks(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	writeOrdered(t, tg, st, owner, env(t, "a-1", base, keyed("Order", "A")), env(t, "a-2", base, keyed("Order", "A")), env(t, "a-3", base, keyed("Order", "A")))
	now := time.Now().UTC().Truncate(time.Millisecond)
	ok, promoted, err := st.MarkDeadOrdered(ctx(t), tg.DB, owner, "a-1", now, "poison")
	if err != nil || !ok || len(promoted) != 0 {
		t.Fatalf("mark dead: ok=%v promoted=%v err=%v; want dead, nothing promoted", ok, ids(promoted), err)
	}
	blocked, err := st.BlockedKeys(ctx(t), tg.DB, core.DeadFilter{AggregateType: "Order"})
	if err != nil {
		t.Fatal(err)
	}
	if len(blocked) != 1 || blocked[0].AggregateID != "A" || blocked[0].EventID != "a-1" || blocked[0].Waiting != 2 || blocked[0].LastError != "poison" || blocked[0].Seq != 1 {
		t.Fatalf("blocked keys: %+v", blocked)
	}
	stats, err := inspector(t, tg.Ordered).Stats(ctx(t), tg.DB)
	if err != nil || stats.BlockedKeys != 1 || stats.Waiting != 2 {
		t.Fatalf("stats: %+v %v; want 1 blocked key, 2 waiting", stats, err)
	}
	// Replay: the head is delivered again; its DONE promotes the next.
	if n, err := tg.Ordered.ReplayDead(ctx(t), tg.DB, []string{"a-1"}, now); err != nil || n != 1 {
		t.Fatalf("replay: %d %v", n, err)
	}
	if got := ids(claim(t, tg, tg.DB, owner, now.Add(time.Second), 10)); !slices.Equal(got, []string{"a-1"}) {
		t.Fatalf("claimed %v after replay, want [a-1]", got)
	}
	if _, promoted, err = st.MarkDoneOrdered(ctx(t), tg.DB, owner, []string{"a-1"}, now); err != nil || len(promoted) != 1 || promoted[0].ID() != "a-2" {
		t.Fatalf("done of the replayed head promoted %v (%v), want a-2", ids(promoted), err)
	}
	// a-2 dies too; skipping it makes a-3 NEW, unleased.
	if ok, _, err := st.MarkDeadOrdered(ctx(t), tg.DB, owner, "a-2", now, "poison"); err != nil || !ok {
		t.Fatalf("mark dead a-2: %v %v", ok, err)
	}
	if n, err := st.SkipDead(ctx(t), tg.DB, []string{"a-2", "a-1", "nope"}, now); err != nil || n != 1 {
		t.Fatalf("skip: %d %v; want 1 key moved", n, err)
	}
	wantState(t, tg, "a-2", core.StatusDead, 2, "")
	wantState(t, tg, "a-3", core.StatusNew, 3, "")
	if blocked, err := st.BlockedKeys(ctx(t), tg.DB, core.DeadFilter{}); err != nil || len(blocked) != 0 {
		t.Fatalf("blocked keys after skip: %+v %v", blocked, err)
	}
	if n, err := st.SkipDead(ctx(t), tg.DB, []string{"a-2"}, now); err != nil || n != 0 {
		t.Fatalf("second skip: %d %v; want 0", n, err)
	}
}

func testDeadContinues(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	writeOrdered(t, tg, st, owner, env(t, "l-1", base, keyed("Ledger", "L")), env(t, "l-2", base, keyed("Ledger", "L")))
	ok, promoted, err := st.MarkDeadOrdered(ctx(t), tg.DB, owner, "l-1", time.Now(), "poison")
	if err != nil || !ok || len(promoted) != 1 || promoted[0].ID() != "l-2" || promoted[0].LockedBy != owner {
		t.Fatalf("dead under DeadContinues: ok=%v promoted=%v err=%v; want l-2 leased by %s", ok, ids(promoted), err, owner)
	}
	if blocked, err := st.BlockedKeys(ctx(t), tg.DB, core.DeadFilter{}); err != nil || len(blocked) != 0 {
		t.Fatalf("blocked keys: %+v %v", blocked, err)
	}
}

// testSeqFollowsCommit: a transaction that began first, and whose event
// claims an earlier time, still comes after a transaction that wrote the key
// and committed before it wrote.
func testSeqFollowsCommit(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	c := ctx(t)
	if !tg.server {
		// SQLite has one writer, and one write connection: the other
		// transaction commits before this one begins.
		writeOrdered(t, tg, st, "", env(t, "a-first", base, keyed("Order", "A")))
	}
	early, err := tg.DB.BeginTx(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer early.Rollback()
	if tg.server {
		// A snapshot taken before the other transaction writes. (SQLite
		// would refuse the later write of a transaction whose snapshot
		// predates another's commit.)
		var one int
		if err := early.QueryRowContext(c, "SELECT 1").Scan(&one); err != nil {
			t.Fatal(err)
		}
		writeOrdered(t, tg, st, "", env(t, "a-first", base, keyed("Order", "A")))
	}
	if _, err := st.InsertOrdered(c, early, []core.Envelope{env(t, "a-second", base.Add(-10*time.Second), keyed("Order", "A"))}, core.InsertOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := early.Commit(); err != nil {
		t.Fatal(err)
	}
	wantState(t, tg, "a-first", core.StatusNew, 1, "")
	wantState(t, tg, "a-second", core.StatusWaiting, 2, "")
}

// testConcurrentOrdered: writers on separate pools write one key
// concurrently, in transactions of one or two events, while a finisher
// claims and finishes its head as fast as it can. Every event ends DONE,
// the finisher saw them in seq order, each seq once, and each
// transaction's events consecutive.
func testConcurrentOrdered(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	writers, perWriter := 4, 25
	if !tg.server {
		writers, perWriter = 2, 20
	}
	c := ctx(t)
	var wg sync.WaitGroup
	errs := make(chan error, writers+1)
	written := make(chan struct{})
	for w := range writers {
		db := tg.Reopen(t)
		wg.Go(func() {
			for i := 0; i < perWriter; {
				n := 1 + i%2
				n = min(n, perWriter-i)
				envs := make([]core.Envelope, n)
				for j := range n {
					envs[j] = env(t, fmt.Sprintf("w%d-%03d", w, i+j), base, keyed("Order", "K"))
				}
				if err := inTx(c, db, func(tx *sql.Tx) error {
					_, err := st.InsertOrdered(c, tx, envs, core.InsertOptions{})
					return err
				}); err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				i += n
			}
		})
	}
	go func() { wg.Wait(); close(written) }()
	total := writers * perWriter
	var order []core.Event
	fdb := tg.Reopen(t)
	for len(order) < total {
		evs := claim(t, tg, fdb, owner, time.Now().Add(time.Second), 10)
		for len(evs) > 0 {
			if len(evs) != 1 {
				t.Fatalf("claimed %d events of one key at once: %v", len(evs), ids(evs))
			}
			order = append(order, evs[0])
			_, promoted, err := st.MarkDoneOrdered(c, fdb, owner, []string{evs[0].ID()}, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			evs = promoted
		}
		if len(order) < total {
			select {
			case err := <-errs:
				t.Fatal(err)
			case <-written:
			default:
			}
		}
	}
	<-written
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	for i, ev := range order {
		if ev.Seq != int64(i+1) {
			t.Fatalf("delivery %d has seq %d", i+1, ev.Seq)
		}
	}
	// Each writer's events in its own write order.
	last := map[string]string{}
	for _, ev := range order {
		w := ev.ID()[:2]
		if prev, ok := last[w]; ok && prev > ev.ID() {
			t.Fatalf("%s delivered after %s", ev.ID(), prev)
		}
		last[w] = ev.ID()
	}
	if n := count(t, tg, "status = 1"); n != total {
		t.Fatalf("%d DONE rows, want %d", n, total)
	}
}

func inTx(c context.Context, db *sql.DB, fn func(tx *sql.Tx) error) error {
	tx, err := db.BeginTx(c, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// testOrderedBatch: one DONE batch over the heads of several keys (and an
// unordered event) moves every key and promotes each key's next event,
// leased by the finisher; a key whose head is not in the batch stays.
func testOrderedBatch(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	var envs []core.Envelope
	for _, k := range []string{"A", "B", "C", "D"} {
		envs = append(envs, env(t, k+"-1", base, keyed("Order", k)), env(t, k+"-2", base, keyed("Order", k)))
	}
	envs = append(envs, env(t, "u-1", base, keyed("Other", "A")))
	writeOrdered(t, tg, st, owner, envs...)
	now := time.Now().UTC().Truncate(time.Millisecond)
	n, promoted, err := st.MarkDoneOrdered(ctx(t), tg.DB, owner, []string{"C-1", "A-1", "u-1", "B-1"}, now)
	if err != nil || n != 4 {
		t.Fatalf("mark done: n=%d err=%v", n, err)
	}
	got := ids(promoted)
	slices.Sort(got)
	if want := []string{"A-2", "B-2", "C-2"}; !slices.Equal(got, want) {
		t.Fatalf("promoted %v, want %v", got, want)
	}
	for _, id := range []string{"A-2", "B-2", "C-2"} {
		wantState(t, tg, id, core.StatusNew, 2, owner)
	}
	wantState(t, tg, "D-2", core.StatusWaiting, 2, "")
	// The same batch again changes nothing: the rows are DONE.
	n, promoted, err = st.MarkDoneOrdered(ctx(t), tg.DB, owner, []string{"C-1", "A-1", "u-1", "B-1"}, now)
	if err != nil || n != 0 || len(promoted) != 0 {
		t.Fatalf("mark done again: n=%d promoted=%v err=%v", n, ids(promoted), err)
	}
}

// testOrderedInsertFails: an ordered write that fails on a duplicate id in
// the caller's transaction takes no sequence number: whether the
// transaction goes on (and commits a write of the key) or is rolled back
// (where the failure aborted it), the key's next events follow without a
// gap.
func testOrderedInsertFails(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	c := ctx(t)
	writeOrdered(t, tg, st, "", env(t, "A-1", base, keyed("Order", "A")))
	for _, batch := range [][]core.Envelope{
		{env(t, "A-1", base, keyed("Order", "A"))},
		{env(t, "B-1", base, keyed("Order", "B")), env(t, "A-x", base, keyed("Order", "A")), env(t, "A-1", base, keyed("Order", "A"))},
	} {
		n := count(t, tg, "aggregate_id = 'A'") + 1 // the next seq of A
		tx, err := tg.DB.BeginTx(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.InsertOrdered(c, tx, batch, core.InsertOptions{}); !errors.Is(err, core.ErrDuplicateEvent) {
			_ = tx.Rollback()
			t.Fatalf("write of %d events, one a duplicate: err = %v, want ErrDuplicateEvent", len(batch), err)
		}
		if _, err := tx.ExecContext(c, "SELECT 1"); err != nil {
			_ = tx.Rollback() // the failure aborted the transaction (PostgreSQL)
			continue
		}
		res, err := st.InsertOrdered(c, tx, []core.Envelope{env(t, fmt.Sprintf("A-%d", n), base, keyed("Order", "A"))}, core.InsertOptions{})
		if err != nil {
			_ = tx.Rollback()
			t.Fatalf("write after a failed one in the same transaction: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Seqs, []int64{int64(n)}) {
			t.Fatalf("seqs after a failed write = %v, want [%d]", res.Seqs, n)
		}
	}
	n := count(t, tg, "aggregate_id = 'A'") + 1
	id := fmt.Sprintf("A-%d", n)
	writeOrdered(t, tg, st, "", env(t, id, base, keyed("Order", "A")), env(t, "B-1", base, keyed("Order", "B")))
	wantState(t, tg, id, core.StatusWaiting, int64(n), "")
	wantState(t, tg, "B-1", core.StatusNew, 1, "")
}

// testOrderedBatchRuns: a DONE batch holding several events of one key
// (leased together only after a redelivery or a manual fix, but possible)
// moves the key through the run of them that follows its done_seq without
// a gap, and no further.
func testOrderedBatchRuns(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	var envs []core.Envelope
	for _, id := range []string{"A-1", "A-2", "A-3", "A-4", "A-5"} {
		envs = append(envs, env(t, id, base, keyed("Order", "A")))
	}
	envs = append(envs, env(t, "B-1", base, keyed("Order", "B")), env(t, "B-2", base, keyed("Order", "B")))
	writeOrdered(t, tg, st, owner, envs...)
	// leased as if delivered beside their predecessors.
	if _, err := tg.DB.ExecContext(ctx(t), "UPDATE "+tg.Table+" SET status = 0, locked_by = '"+owner+
		"', locked_at = created_at WHERE event_id IN ('A-2', 'A-4')"); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	n, promoted, err := st.MarkDoneOrdered(ctx(t), tg.DB, owner, []string{"A-4", "B-1", "A-2", "A-1"}, now)
	if err != nil || n != 4 {
		t.Fatalf("mark done: n=%d err=%v", n, err)
	}
	got := ids(promoted)
	slices.Sort(got)
	if want := []string{"A-3", "B-2"}; !slices.Equal(got, want) {
		t.Fatalf("promoted %v, want %v", got, want)
	}
	wantState(t, tg, "A-3", core.StatusNew, 3, owner)
	wantState(t, tg, "A-5", core.StatusWaiting, 5, "")
}

// testDonePromotesOnlyWhereWaiting: a DONE batch whose keys have no event
// after the finished ones runs no promotion statement of its own (on
// PostgreSQL the promotion is part of the batch's one statement), even in a
// transaction whose earlier ordered write left a value behind (MySQL reports
// the waiting keys through the insert id); one waiting key among idle ones,
// wherever it sorts, is promoted.
func testDonePromotesOnlyWhereWaiting(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	writeOrdered(t, tg, st, owner,
		env(t, "A-1", base, keyed("Order", "A")), env(t, "C-1", base, keyed("Order", "C")),
		env(t, "D-1", base, keyed("Order", "D")), env(t, "E-1", base, keyed("Order", "E")),
		env(t, "B-1", base, keyed("Order", "B")), env(t, "B-2", base, keyed("Order", "B")))
	c := ctx(t)
	tx, err := tg.DB.BeginTx(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	// An ordered write of a key that exists, in the batch's transaction.
	if _, err := st.InsertOrdered(c, tx, []core.Envelope{env(t, "F-1", base, keyed("Order", "F")),
		env(t, "F-2", base, keyed("Order", "F"))}, core.InsertOptions{LeaseOwner: owner, LeaseAt: base}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.InsertOrdered(c, tx, []core.Envelope{env(t, "F-3", base, keyed("Order", "F"))},
		core.InsertOptions{LeaseOwner: owner, LeaseAt: base}); err != nil {
		t.Fatal(err)
	}
	counted := &countingTx{DBTX: tx}
	now := time.Now().UTC().Truncate(time.Millisecond)
	n, promoted, err := st.MarkDoneOrdered(c, counted, owner, []string{"A-1", "C-1"}, now)
	if err != nil || n != 2 || len(promoted) != 0 {
		t.Fatalf("mark done A-1, C-1: n=%d promoted=%v err=%v", n, ids(promoted), err)
	}
	if counted.promotions != 0 {
		t.Errorf("mark done of keys with nothing waiting ran %d promotion statements, want 0: %q", counted.promotions, counted.last)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	n, promoted, err = st.MarkDoneOrdered(c, tg.DB, owner, []string{"D-1", "B-1", "E-1"}, now)
	if err != nil || n != 3 {
		t.Fatalf("mark done D-1, B-1, E-1: n=%d err=%v", n, err)
	}
	if got := ids(promoted); !slices.Equal(got, []string{"B-2"}) {
		t.Fatalf("promoted %v, want [B-2]", got)
	}
	wantState(t, tg, "B-2", core.StatusNew, 2, owner)
	wantState(t, tg, "F-2", core.StatusWaiting, 2, "")
}

// testDoneManyKeys: a DONE batch of 200 keys, more than the store's key
// statements name at once, moves every key and promotes the next event of
// each key that has one, whichever part of the batch its key falls in: the
// first 64 keys, in key order, have nothing waiting.
func testDoneManyKeys(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	const keys = 200
	var envs []core.Envelope
	var heads, seconds, thirds []string
	for k := range keys {
		key := fmt.Sprintf("K%03d", k)
		events := 1
		switch {
		case k >= 150:
			events = 3
		case k >= 64:
			events = 2
		}
		for i := 1; i <= events; i++ {
			id := fmt.Sprintf("%s-%d", key, i)
			envs = append(envs, env(t, id, base, keyed("Order", key)))
			switch i {
			case 1:
				heads = append(heads, id)
			case 2:
				seconds = append(seconds, id)
			case 3:
				thirds = append(thirds, id)
			}
		}
	}
	writeOrdered(t, tg, st, owner, envs...)
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, step := range []struct {
		done, want []string
		seq        int64
	}{{heads, seconds, 2}, {seconds, thirds, 3}, {thirds, nil, 0}} {
		n, promoted, err := st.MarkDoneOrdered(ctx(t), tg.DB, owner, step.done, now)
		if err != nil || n != int64(len(step.done)) {
			t.Fatalf("mark done %d events: n=%d err=%v", len(step.done), n, err)
		}
		got := ids(promoted)
		slices.Sort(got)
		if !slices.Equal(got, step.want) {
			t.Fatalf("mark done %d events promoted %d %v, want %d %v", len(step.done), len(got), got, len(step.want), step.want)
		}
		for _, id := range step.want {
			wantState(t, tg, id, core.StatusNew, step.seq, owner)
		}
	}
	for _, id := range append(append(heads, seconds...), thirds...) {
		if ev := get(t, tg, id); ev.Status != core.StatusDone {
			t.Fatalf("%s: status %v, want DONE", id, ev.Status)
		}
	}
}

// countingTx counts the statements that promote waiting events (an UPDATE
// of rows in status WAITING, 4) and are not the single statement of a whole
// DONE batch (PostgreSQL's, a WITH).
type countingTx struct {
	core.DBTX
	promotions int
	last       string
}

func (c *countingTx) count(query string) {
	if strings.HasPrefix(query, "UPDATE") && strings.Contains(query, "status = 4") {
		c.promotions++
		c.last = query
	}
}

func (c *countingTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c.count(query)
	return c.DBTX.ExecContext(ctx, query, args...)
}

func (c *countingTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	c.count(query)
	return c.DBTX.QueryContext(ctx, query, args...)
}

func (c *countingTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	c.count(query)
	return c.DBTX.QueryRowContext(ctx, query, args...)
}

// testPurgeKeys: the key rows deleted are those of keys with every event
// finished and purged, idle since the cutoff; a key written again starts
// afresh; a writer holding a key's row keeps it.
func testPurgeKeys(t *testing.T, tg Target) {
	st := orderedStore(t, tg)
	kp, ok := core.StoreAs[interface {
		PurgeKeys(ctx context.Context, db core.DBTX, before time.Time, limit int) (int64, error)
	}](tg.Ordered)
	if !ok {
		t.Fatalf("%T has no PurgeKeys", tg.Ordered)
	}
	if _, err := kp.PurgeKeys(ctx(t), tg.DB, time.Now(), 0); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("limit 0: err = %v, want core.ErrInvalid", err)
	}
	// A: finished and purged. B: finished, rows kept. C: one event waiting.
	writeOrdered(t, tg, st, owner, env(t, "A-1", base, keyed("Order", "A")), env(t, "B-1", base, keyed("Order", "B")),
		env(t, "C-1", base, keyed("Order", "C")), env(t, "C-2", base, keyed("Order", "C")))
	now := time.Now().UTC().Truncate(time.Millisecond)
	if n, _, err := st.MarkDoneOrdered(ctx(t), tg.DB, owner, []string{"A-1", "B-1", "C-1"}, now); err != nil || n != 3 {
		t.Fatalf("mark done: n=%d err=%v", n, err)
	}
	if _, err := tg.DB.ExecContext(ctx(t), "DELETE FROM "+tg.Table+" WHERE event_id = 'A-1'"); err != nil {
		t.Fatal(err)
	}
	if n, err := kp.PurgeKeys(ctx(t), tg.DB, now.Add(-time.Hour), 100); err != nil || n != 0 {
		t.Fatalf("purge keys idle for an hour: n=%d err=%v, want 0 (they were finished just now)", n, err)
	}
	if n, err := kp.PurgeKeys(ctx(t), tg.DB, now.Add(time.Hour), 100); err != nil || n != 1 {
		t.Fatalf("purge keys: n=%d err=%v, want 1 (key A)", n, err)
	}
	// A starts afresh at 1; B goes on at 2.
	if w := writeOrdered(t, tg, st, "", env(t, "A-n", base, keyed("Order", "A")), env(t, "B-2", base, keyed("Order", "B"))); len(w) != 0 {
		t.Fatalf("waiting %v", w)
	}
	wantState(t, tg, "A-n", core.StatusNew, 1, "")
	wantState(t, tg, "B-2", core.StatusNew, 2, "")

	if tg.DB.Stats().MaxOpenConnections == 1 {
		return // one connection (SQLite): a purge cannot run beside a writer
	}
	// D is idle and purgeable, but a writer holds its row in an open
	// transaction: whether the purge runs before or after the writer
	// commits, the row stays and D goes on at 2.
	writeOrdered(t, tg, st, owner, env(t, "D-1", base, keyed("Order", "D")))
	if n, _, err := st.MarkDoneOrdered(ctx(t), tg.DB, owner, []string{"D-1"}, now); err != nil || n != 1 {
		t.Fatalf("mark done D-1: n=%d err=%v", n, err)
	}
	tx, err := tg.DB.BeginTx(ctx(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := st.InsertOrdered(ctx(t), tx, []core.Envelope{env(t, "D-2", base, keyed("Order", "D"))}, core.InsertOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tg.DB.ExecContext(ctx(t), "DELETE FROM "+tg.Table+" WHERE event_id = 'D-1'"); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	type result struct {
		n   int64
		err error
	}
	purged := make(chan result, 1)
	go func() {
		close(started)
		n, err := kp.PurgeKeys(ctx(t), tg.DB, now.Add(time.Hour), 100)
		purged <- result{n, err}
	}()
	<-started
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if r := <-purged; r.err != nil {
		t.Fatalf("purge keys beside a writer: %v", r.err)
	}
	wantState(t, tg, "D-2", core.StatusNew, 2, "")
	if w := writeOrdered(t, tg, st, "", env(t, "D-3", base, keyed("Order", "D"))); !slices.Equal(w, []string{"D-3"}) {
		t.Fatalf("D-3 waiting = %v, want [D-3] (D-2 unfinished)", w)
	}
}

// inspector returns st's core.Inspector, looking through wrappers (a store
// that wraps another keeps its capabilities by Unwrap), or fails the test.
func inspector(t testing.TB, st core.Store) core.Inspector {
	t.Helper()
	in, ok := core.StoreAs[core.Inspector](st)
	if !ok {
		t.Fatalf("%T does not implement core.Inspector", st)
	}
	return in
}
