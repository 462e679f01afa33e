package browsertest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/console"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/poller"
)

// TestOrderedInBrowser drives the console on an ordered store: a key held
// up by its DEAD head, an event its key was moved past by an earlier skip,
// and an unordered DEAD event. The operator sees the head marked, skips it
// after the confirmation page and sees the key's waiting events delivered
// in order; "replay all" then lists what it leaves out and replays only the
// unordered event.
func TestOrderedInBrowser(t *testing.T) {
	chromium(t) // skip before touching any database
	shots := os.Getenv(screenshotsEnv)
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		// Not parallel: one browser at a time is plenty on 2 cores.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shoot := shooter{}
		if tg.Name == "sqlite" {
			shoot.dir = shots
		}

		// The table as a failed night left it:
		//   a-1 a-2 a-3  key Order/K1: a-1 DEAD (the head), a-2 and a-3 waiting
		//   b-1          key Order/K2: DEAD, skipped earlier (its key moved past it)
		//   d-1          Invoice, not ordered: DEAD
		o, ok := core.StoreAs[core.OrderedStore](tg.Ordered)
		if !ok {
			t.Fatalf("%T is not ordered", tg.Ordered)
		}
		var envs []core.Envelope
		for _, e := range [][3]string{{"a-1", "Order", "K1"}, {"a-2", "Order", "K1"}, {"a-3", "Order", "K1"},
			{"b-1", "Order", "K2"}, {"d-1", "Invoice", "I1"}} {
			env, err := core.NewEnvelope(core.EnvelopeSpec{ID: e[0], Type: core.EventName("Placed"),
				AggregateType: core.AggregateName(e[1]), AggregateID: e[2], JSON: []byte(`{}`)})
			must(t, err)
			envs = append(envs, env)
		}
		now := time.Now()
		_, err := o.InsertOrdered(ctx, tg.DB, envs, core.InsertOptions{LeaseOwner: "night", LeaseAt: now})
		must(t, err)
		for _, id := range []string{"a-1", "b-1"} {
			_, _, err := o.MarkDeadOrdered(ctx, tg.DB, "night", id, now, "inventory service: 503 ("+id+")")
			must(t, err)
		}
		_, err = tg.Ordered.MarkDead(ctx, tg.DB, "night", "d-1", now, "invoice service: 503")
		must(t, err)
		_, err = o.SkipDead(ctx, tg.DB, []string{"b-1"}, now)
		must(t, err)

		// A running outbox that records what it delivers.
		var mu sync.Mutex
		var delivered []string
		reg := core.NewRegistry()
		must(t, reg.RegisterFallback(core.ListenerFunc(func(_ context.Context, ev core.Event) error {
			mu.Lock()
			defer mu.Unlock()
			delivered = append(delivered, ev.ID())
			return nil
		})))
		ob, err := outbox.New(outbox.Config{DB: tg.DB, Store: tg.Ordered, Registry: reg,
			Poller: poller.Config{Interval: 50 * time.Millisecond}})
		must(t, err)
		must(t, ob.Start(ctx))
		defer func() { must(t, ob.Close(context.WithoutCancel(ctx))) }()
		got := func() string {
			mu.Lock()
			defer mu.Unlock()
			return strings.Join(delivered, " ")
		}

		c, err := console.New(console.Config{DB: tg.DB, Store: tg.Ordered, Title: "orders", AllowWrites: true})
		must(t, err)
		mux := http.NewServeMux()
		mux.Handle("/ops/outbox/", http.StripPrefix("/ops/outbox", c))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		base := srv.URL + "/ops/outbox/"
		tab := browser(t, ctx)

		// The list marks the head and the event its key moved past.
		must(t, chromedp.Do(tab, chromedp.Navigate(base+"dead"), chromedp.WaitVisible(chromedp.CSS("#dead-events"))))
		if s := text(t, tab, `tr[data-id="a-1"] .badge.head`); s != "blocks its key · 2 waiting" {
			t.Errorf("a-1's mark = %q", s)
		}
		if s := text(t, tab, `tr[data-id="b-1"] .badge.moved`); s != "key moved past it" {
			t.Errorf("b-1's mark = %q", s)
		}
		shoot.shoot(t, tab, "console-ordered-dead-events")

		// Skip the head, through its confirmation page.
		must(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`tr[data-id="a-1"] a.skip`)),
			chromedp.WaitVisible(chromedp.CSS("#skip-text"))))
		if s := text(t, tab, "#skip-text"); !strings.Contains(s, "This moves key Order/K1 past its DEAD head a-1") {
			t.Errorf("skip confirmation = %q", s)
		}
		if got := got(); got != "" {
			t.Fatalf("delivered %q before the skip was confirmed", got)
		}
		must(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS("#confirm-skip")), chromedp.WaitVisible(chromedp.CSS("#notice"))))
		if s := text(t, tab, "#notice"); !strings.HasPrefix(s, "Skipped a-1") {
			t.Errorf("notice after the skip = %q", s)
		}
		waitFor(t, ctx, "a-2 and a-3 delivered", func() (bool, error) { return got() == "a-2 a-3", nil })

		// Replay all leaves out what the keys moved past, and says so.
		must(t, chromedp.Do(tab, chromedp.Navigate(base+"dead"), chromedp.WaitVisible(chromedp.CSS("#replay-all"))))
		must(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS("#replay-all")), chromedp.WaitVisible(chromedp.CSS("#left-out-events"))))
		if s := text(t, tab, "#confirm-text"); !strings.Contains(s, "This moves 1 of the 3 dead events") {
			t.Errorf("confirmation = %q", s)
		}
		left, err := chromedp.Run(tab, chromedp.AttributesAll(chromedp.CSSAll("#left-out-events tbody tr")))
		must(t, err)
		var ids []string
		for _, a := range left {
			ids = append(ids, a["data-id"])
		}
		if strings.Join(ids, " ") != "a-1 b-1" {
			t.Errorf("left out: %v, want a-1 b-1", ids)
		}
		shoot.shoot(t, tab, "console-ordered-replay-all")
		must(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS("#confirm-replay-all")), chromedp.WaitVisible(chromedp.CSS("#notice"))))
		if s := text(t, tab, "#notice"); !strings.Contains(s, "Replayed 1 events") || !strings.Contains(s, "Left out 2 ordered events") {
			t.Errorf("notice after replay all = %q", s)
		}
		waitFor(t, ctx, "d-1 delivered", func() (bool, error) { return got() == "a-2 a-3 d-1", nil })
		for id, want := range map[string]core.Status{"a-1": core.StatusDead, "b-1": core.StatusDead} {
			ev, err := tg.Ordered.Get(ctx, tg.DB, id)
			must(t, err)
			if ev.Status != want {
				t.Errorf("%s is %v, want %v", id, ev.Status, want)
			}
		}
	})
}
