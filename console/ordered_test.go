package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/console"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// seedOrdered writes, through the ordered store of tg (aggregate type
// "Order" blocks on DEAD, "Ledger" continues), and returns tg on it:
//
//	a-1 a-2 a-3  key Order/K1: a-1 DEAD, the head of a blocked key; a-2, a-3 waiting
//	b-1 b-2      key Order/K2: b-1 DEAD and skipped (its key moved past it); b-2 NEW
//	c-1          key Ledger/L1: DEAD under DeadContinues (its key moved past it)
//	d-1          Invoice, not ordered: DEAD
func seedOrdered(t *testing.T, tg testdb.Target) testdb.Target {
	t.Helper()
	ctx := testCtx(t)
	o, ok := core.StoreAs[core.OrderedStore](tg.Ordered)
	if !ok {
		t.Fatalf("%T is not ordered", tg.Ordered)
	}
	var envs []core.Envelope
	for _, e := range [][3]string{{"a-1", "Order", "K1"}, {"a-2", "Order", "K1"}, {"a-3", "Order", "K1"},
		{"b-1", "Order", "K2"}, {"b-2", "Order", "K2"}, {"c-1", "Ledger", "L1"}, {"d-1", "Invoice", "I1"}} {
		env, err := core.NewEnvelope(core.EnvelopeSpec{ID: e[0], Type: core.EventName("Placed"), AggregateType: core.AggregateName(e[1]),
			AggregateID: e[2], JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	now := time.Now()
	if _, err := o.InsertOrdered(ctx, tg.DB, envs, core.InsertOptions{LeaseOwner: "o", LeaseAt: now}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a-1", "b-1", "c-1"} {
		if ok, _, err := o.MarkDeadOrdered(ctx, tg.DB, "o", id, now, "failed: "+id); err != nil || !ok {
			t.Fatalf("mark %s dead: %v %v", id, ok, err)
		}
	}
	if ok, err := tg.Ordered.MarkDead(ctx, tg.DB, "o", "d-1", now, "failed: d-1"); err != nil || !ok {
		t.Fatalf("mark d-1 dead: %v %v", ok, err)
	}
	if n, err := o.SkipDead(ctx, tg.DB, []string{"b-1"}, now); err != nil || n != 1 {
		t.Fatalf("skip b-1: %d %v", n, err)
	}
	tg.Store = tg.Ordered
	return tg
}

// row returns the <tr> of id in body.
func row(t *testing.T, body, id string) string {
	t.Helper()
	i := strings.Index(body, `<tr data-id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no row for %s:\n%s", id, body)
	}
	j := strings.Index(body[i:], "</tr>")
	return body[i : i+j]
}

// TestOrderedMarks: the dead-event list and the event pages mark the DEAD
// head of a blocked key (with a Skip link when writes are enabled) and the
// ordered events their keys have moved past.
func TestOrderedMarks(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		tg = seedOrdered(t, tg)
		s := newServer(t, tg, console.Config{AllowWrites: true})
		r := s.get("dead")
		wantStatus(t, r, http.StatusOK)
		head := row(t, r.body, "a-1")
		if !strings.Contains(head, "blocks its key · 2 waiting") || !strings.Contains(head, `href="skip?id=a-1"`) {
			t.Errorf("the blocked head's row is not marked, or has no Skip link:\n%s", head)
		}
		for _, id := range []string{"b-1", "c-1"} {
			if got := row(t, r.body, id); !strings.Contains(got, "key moved past it") || strings.Contains(got, "skip?id=") {
				t.Errorf("%s: not marked as moved past, or offered a skip:\n%s", id, got)
			}
		}
		if got := row(t, r.body, "d-1"); strings.Contains(got, "badge") || strings.Contains(got, "skip?id=") {
			t.Errorf("the unordered d-1 is marked:\n%s", got)
		}

		wantStatus(t, s.get("event?id=a-1"), http.StatusOK, `id="blocked-head"`, "key <strong>Order/K1</strong>: its 2 later events wait",
			`href="skip?id=a-1"`)
		wantStatus(t, s.get("event?id=b-1"), http.StatusOK, `id="moved-past"`, "Replay this event out of order")
		r = s.get("event?id=d-1")
		if strings.Contains(r.body, `class="warnbox"`) || strings.Contains(r.body, "skip?id=") {
			t.Errorf("the unordered d-1's page warns or offers a skip:\n%s", r.body)
		}
		// The overview's blocked keys have a Skip link too.
		wantStatus(t, s.get(""), http.StatusOK, `<table id="blocked-keys">`, `href="skip?id=a-1"`)
		// Read-only: marked, no Skip link.
		ro := newServer(t, tg, console.Config{})
		r = ro.get("dead")
		if head := row(t, r.body, "a-1"); !strings.Contains(head, "blocks its key") || strings.Contains(head, "skip?id=") {
			t.Errorf("read-only: the head's row:\n%s", head)
		}
	})
}

// TestOrderedReplayAll: "replay all" replays the blocked heads and the
// unordered events, leaves out the ordered events their keys have moved
// past, and its confirmation page lists those.
func TestOrderedReplayAll(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		tg = seedOrdered(t, tg)
		s := newServer(t, tg, console.Config{AllowWrites: true, ReplayBatchSize: 1})
		r := s.get("replay-all")
		wantStatus(t, r, http.StatusOK, "This moves <strong>2</strong> of the 4 dead events", `name="confirmed" value="2"`,
			"1 of them is the DEAD head of blocked ordered keys", "Left out: <strong>2</strong> ordered events",
			`<table id="left-out-events">`, `href="event?id=b-1"`, `href="event?id=c-1"`, "Replay 2 events")
		if left := r.body[strings.Index(r.body, `id="left-out"`):]; strings.Contains(left, "event?id=a-1") || strings.Contains(left, "event?id=d-1") {
			t.Errorf("a replayable event is listed as left out:\n%s", left)
		}
		tok := tokenRE.FindStringSubmatch(r.body)[1]
		r = s.post("replay-all", url.Values{"confirmed": {"2"}, "csrf_token": {tok}})
		if loc := r.header.Get("Location"); r.status != http.StatusSeeOther || loc != "dead?left-out=2&replayed-all=2" {
			t.Fatalf("replay-all: %d, Location %q", r.status, loc)
		}
		for id, want := range map[string]core.Status{"a-1": core.StatusNew, "d-1": core.StatusNew,
			"b-1": core.StatusDead, "c-1": core.StatusDead, "a-2": core.StatusWaiting} {
			if st := status(t, tg, id); st != want {
				t.Errorf("%s is %v, want %v", id, st, want)
			}
		}
		wantStatus(t, s.get("dead?left-out=2&replayed-all=2"), http.StatusOK,
			"Replayed 2 events", "Left out 2 ordered events their keys have moved past.")
		// Only events the keys moved past are left: nothing to replay in order.
		wantStatus(t, s.get("replay-all"), http.StatusOK, "None of the 2 dead events that match can be replayed in order")
		// A filter on the unordered type sees no ordered event.
		wantStatus(t, s.get("replay-all?aggregate=Order"), http.StatusOK, "None of the 1 dead events")
	})
}

// TestOrderedSkip: Skip, after its confirmation page, moves the key past
// its DEAD head; the head stays DEAD and the key's next event is NEW.
func TestOrderedSkip(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		tg = seedOrdered(t, tg)
		s := newServer(t, tg, console.Config{AllowWrites: true})
		r := s.get("skip?id=a-1")
		wantStatus(t, r, http.StatusOK, "This moves key <strong>Order/K1</strong> past its DEAD head", "without delivering it",
			"its 2 waiting\nevents follow in order", `id="confirm-skip"`, "failed: a-1")
		// Looking changes nothing.
		if st := status(t, tg, "a-2"); st != core.StatusWaiting {
			t.Fatalf("a-2 is %v after the confirmation page", st)
		}
		tok := tokenRE.FindStringSubmatch(r.body)[1]
		// Read-only consoles refuse it.
		ro := newServer(t, tg, console.Config{})
		if r := ro.post("skip", url.Values{"id": {"a-1"}, "csrf_token": {tok}}); r.status != http.StatusForbidden {
			t.Errorf("read-only skip: status %d", r.status)
		}
		wantStatus(t, ro.get("skip?id=a-1"), http.StatusOK, "read-only")
		r = s.post("skip", url.Values{"id": {"a-1"}, "csrf_token": {tok}})
		if loc := r.header.Get("Location"); r.status != http.StatusSeeOther || loc != "dead?skipped=a-1" {
			t.Fatalf("skip: %d, Location %q", r.status, loc)
		}
		for id, want := range map[string]core.Status{"a-1": core.StatusDead, "a-2": core.StatusNew, "a-3": core.StatusWaiting} {
			if st := status(t, tg, id); st != want {
				t.Errorf("%s is %v after the skip, want %v", id, st, want)
			}
		}
		wantStatus(t, s.get("dead?skipped=a-1"), http.StatusOK, "Skipped a-1: its key moved past it")
		wantStatus(t, s.get("event?id=a-1"), http.StatusOK, `id="moved-past"`)
		// Again: nothing to skip.
		wantStatus(t, s.get("skip?id=a-1"), http.StatusOK, "is not the DEAD head of a blocked ordered key")
		r = s.post("skip", url.Values{"id": {"a-1"}, "csrf_token": {tok}})
		if loc := r.header.Get("Location"); loc != "dead?not-skipped=a-1" {
			t.Errorf("second skip redirects to %q", loc)
		}
		wantStatus(t, s.get("dead?not-skipped=a-1"), http.StatusOK, "a-1 was not skipped")
		wantStatus(t, s.get("skip?id=d-1"), http.StatusOK, "is not the DEAD head of a blocked ordered key")
		wantStatus(t, s.get("skip?id=nope"), http.StatusNotFound)
	})
}
