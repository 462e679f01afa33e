package browsertest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/console"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/poller"
)

// Environment variables; see the package documentation.
const (
	chromiumEnv    = "OUTBOX_CHROMIUM"
	screenshotsEnv = "OUTBOX_SCREENSHOTS"
)

// chromium returns the browser to run, or skips the test (fails under
// OUTBOX_REQUIRE_DBS=1) when there is none.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv(chromiumEnv); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium on PATH: install Debian's chromium or set " + chromiumEnv + " to a Chromium or Chrome binary"
	if testdb.Required() {
		t.Fatal(msg + " (OUTBOX_REQUIRE_DBS=1)")
	}
	t.Skip(msg)
	return ""
}

// browser starts a headless Chromium with a fresh profile and returns a tab;
// the browser is closed when the test ends.
func browser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(chromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("hide-scrollbars", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		_ = chromedp.Cancel(tab) // closes the browser and waits for it
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(tab); err != nil { // starts the browser
		t.Fatalf("start %s: %v", chromium(t), err)
	}
	return tab
}

// shooter saves full-page screenshots under OUTBOX_SCREENSHOTS, when set,
// for the one dialect that makes them.
type shooter struct {
	dir string
}

func (s shooter) shoot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	if s.dir == "" {
		return
	}
	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(s.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", path, len(png))
}

// payments is a listener that fails permanently while the payment service is
// "down", and reports every event it delivers once it is back.
type payments struct {
	down      atomic.Bool
	delivered chan string
}

func (p *payments) handle(ctx context.Context, ev core.Event) error {
	if p.down.Load() {
		return core.Permanent(fmt.Errorf("payment gateway: POST /v1/captures: 503 Service Unavailable (order %s)", ev.AggregateID()))
	}
	select {
	case p.delivered <- ev.ID():
	case <-ctx.Done():
	}
	return nil
}

// TestConsoleInBrowser drives the console in Chromium on each database: an
// outbox whose listener fails kills three events; the operator lists them,
// replays one, sees it delivered by the running outbox and gone from the
// list, then replays the other two after the confirmation page.
func TestConsoleInBrowser(t *testing.T) {
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

		// A running outbox whose payment listener is broken.
		pay := &payments{delivered: make(chan string, 16)}
		pay.down.Store(true)
		reg := core.NewRegistry()
		must(t, reg.RegisterFunc(core.AggregateName("Payment"), core.EventName("PaymentCaptured"), pay.handle))
		must(t, reg.RegisterFunc(core.AggregateName("Order"), core.EventName("OrderPlaced"), pay.handle))
		must(t, reg.RegisterFunc(core.AggregateName("Order"), core.EventName("OrderShipped"),
			func(context.Context, core.Event) error { return nil }))
		ob, err := outbox.New(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: reg,
			Poller: poller.Config{Interval: 50 * time.Millisecond}})
		must(t, err)
		must(t, ob.Start(ctx))
		defer func() { must(t, ob.Close(context.WithoutCancel(ctx))) }()

		var ids []string
		write := func(agg, typ, aggID string) {
			t.Helper()
			err := ob.Do(ctx, func(ctx context.Context) error {
				env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName(typ),
					AggregateType: core.AggregateName(agg), AggregateID: aggID,
					JSON: []byte(`{"order":"` + aggID + `","amount_cents":4200}`)})
				if err != nil {
					return err
				}
				ids = append(ids, env.ID())
				_, err = ob.Writer().Write(ctx, env)
				return err
			})
			must(t, err)
		}
		for i := range 4 {
			write("Order", "OrderShipped", fmt.Sprintf("o-10%d", i))
		}
		ids = ids[:0]
		write("Payment", "PaymentCaptured", "o-1001")
		write("Order", "OrderPlaced", "o-1002")
		write("Payment", "PaymentCaptured", "o-1003")
		waitFor(t, ctx, "3 dead events", func() (bool, error) {
			n, err := tg.Store.CountDead(ctx, tg.DB, core.DeadFilter{})
			return n == 3, err
		})

		c, err := console.New(console.Config{DB: tg.DB, Store: tg.Store, Title: "checkout", AllowWrites: true})
		must(t, err)
		mux := http.NewServeMux()
		mux.Handle("/ops/outbox/", http.StripPrefix("/ops/outbox", c))
		srv := httptest.NewServer(mux)
		defer srv.Close()
		base := srv.URL + "/ops/outbox/"
		tab := browser(t, ctx)

		// The overview shows the three dead events.
		must(t, chromedp.Do(tab, chromedp.Navigate(base), chromedp.WaitVisible(chromedp.CSS("#by-type"))))
		dead := text(t, tab, "#count-dead")
		if dead != "3" {
			t.Fatalf("overview: dead = %q, want 3", dead)
		}
		shoot.shoot(t, tab, "console-overview")

		// The list shows them with their last error.
		must(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(`a[href="dead"].on, nav a[href="dead"]`)),
			chromedp.WaitVisible(chromedp.CSS("#dead-events"))))
		listed := rows(t, tab)
		if strings.Join(listed, " ") != strings.Join(ids, " ") {
			t.Fatalf("dead list = %v, want %v (oldest first)", listed, ids)
		}
		if errText := text(t, tab, fmt.Sprintf(`tr[data-id="%s"] td.err`, ids[1])); !strings.Contains(errText, "503 Service Unavailable (order o-1002)") {
			t.Errorf("last error of %s = %q", ids[1], errText)
		}
		shoot.shoot(t, tab, "console-dead-events")

		// One of them in full: its payload hidden, a replay button.
		must(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS(fmt.Sprintf(`a[href="event?id=%s"]`, ids[0]))),
			chromedp.WaitVisible(chromedp.CSS("#payload-hidden"))))
		if s := text(t, tab, "#event"); !strings.Contains(s, "DEAD") || !strings.Contains(s, "order o-1001") {
			t.Errorf("event page = %q", s)
		}
		shoot.shoot(t, tab, "console-event")
		must(t, chromedp.Do(tab, chromedp.Navigate(base+"dead"), chromedp.WaitVisible(chromedp.CSS("#dead-events"))))

		// The payment service is back: replay the middle one.
		pay.down.Store(false)
		must(t, chromedp.Do(tab,
			chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-id="%s"] button.replay`, ids[1]))),
			chromedp.WaitVisible(chromedp.CSS("#notice"))))
		if n := text(t, tab, "#notice"); !strings.Contains(n, "Replayed "+ids[1]) {
			t.Errorf("notice after replay = %q", n)
		}
		if got := rows(t, tab); strings.Join(got, " ") != ids[0]+" "+ids[2] {
			t.Errorf("after replaying %s the list shows %v", ids[1], got)
		}
		expectDelivery(t, ctx, pay, ids[1])
		waitFor(t, ctx, ids[1]+" DONE", func() (bool, error) {
			ev, err := tg.Store.Get(ctx, tg.DB, ids[1])
			return ev.Status == core.StatusDone, err
		})

		// Replay the rest, through the confirmation page.
		must(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS("#replay-all")),
			chromedp.WaitVisible(chromedp.CSS("#confirm-text"))))
		if s := text(t, tab, "#confirm-text"); !strings.Contains(s, "This moves 2 dead events") {
			t.Errorf("confirmation = %q", s)
		}
		shoot.shoot(t, tab, "console-replay-all")
		must(t, chromedp.Do(tab, chromedp.Click(chromedp.CSS("#confirm-replay-all")),
			chromedp.WaitVisible(chromedp.CSS("#no-dead"))))
		if n := text(t, tab, "#notice"); !strings.Contains(n, "Replayed 2 events") {
			t.Errorf("notice after replay all = %q", n)
		}
		expectDelivery(t, ctx, pay, ids[0], ids[2])
		if dead := text(t, tab, "#dead-count"); !strings.HasPrefix(dead, "0 dead events") {
			t.Errorf("after replay all: %q", dead)
		}
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func text(t *testing.T, tab context.Context, css string) string {
	t.Helper()
	s, err := chromedp.Run(tab, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		t.Fatalf("text of %s: %v", css, err)
	}
	return strings.TrimSpace(s)
}

// rows returns the event ids of the dead-event list on the page, in order.
func rows(t *testing.T, tab context.Context) []string {
	t.Helper()
	attrs, err := chromedp.Run(tab, chromedp.AttributesAll(chromedp.CSSAll("#dead-events tbody tr")))
	if err != nil {
		t.Fatalf("rows: %v", err)
	}
	ids := make([]string, len(attrs))
	for i, a := range attrs {
		ids[i] = a["data-id"]
	}
	return ids
}

// expectDelivery waits until the listener has delivered every id, in any
// order.
func expectDelivery(t *testing.T, ctx context.Context, p *payments, ids ...string) {
	t.Helper()
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	for len(want) > 0 {
		select {
		case id := <-p.delivered:
			if !want[id] {
				t.Fatalf("delivered %s, want one of %v", id, want)
			}
			delete(want, id)
		case <-ctx.Done():
			t.Fatalf("not delivered: %v", want)
		}
	}
}

// waitFor polls cond until it holds: the outbox records outcomes in the
// database, which offers nothing to wait on.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil && !errors.Is(err, core.ErrNotFound) {
			t.Fatalf("wait for %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
