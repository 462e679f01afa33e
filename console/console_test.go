package console_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/console"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// base is when the seeded rows were created: three days ago, so that a DONE
// row that finished two days ago is purgeable on every database (MySQL's
// purge also requires created_at before the cutoff).
var base = time.Now().UTC().Add(-72 * time.Hour).Truncate(time.Second)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

type seedRow struct {
	id, eventType, aggType string
	status                 core.Status
	payload                string
}

// seed inserts rows created one second apart, in order, in the given states.
func seed(t *testing.T, tg testdb.Target, rows ...seedRow) {
	t.Helper()
	ctx := testCtx(t)
	const owner = "seeder"
	for i, r := range rows {
		payload := r.payload
		if payload == "" {
			payload = `{"n":1}`
		}
		env, err := core.NewEnvelope(core.EnvelopeSpec{ID: r.id, Type: core.EventName(r.eventType),
			AggregateType: core.AggregateName(r.aggType), AggregateID: "agg-" + r.id,
			OccurredAt: base.Add(time.Duration(i) * time.Second), JSON: []byte(payload),
			Headers: map[string]string{"traceparent": "00-trace-" + r.id}})
		if err != nil {
			t.Fatal(err)
		}
		opts := core.InsertOptions{}
		if r.status != core.StatusNew {
			opts = core.InsertOptions{LeaseOwner: owner, LeaseAt: time.Now()}
		}
		if err := tg.Store.Insert(ctx, tg.DB, []core.Envelope{env}, opts); err != nil {
			t.Fatalf("insert %s: %v", r.id, err)
		}
		ok := true
		switch r.status {
		case core.StatusDone:
			ok, err = tg.Store.MarkDone(ctx, tg.DB, owner, r.id, time.Now().Add(-48*time.Hour))
		case core.StatusDead:
			ok, err = tg.Store.MarkDead(ctx, tg.DB, owner, r.id, time.Now(), "listener failed: "+r.id)
		case core.StatusRetry:
			ok, err = tg.Store.MarkRetry(ctx, tg.DB, owner, r.id, time.Now().Add(time.Hour), "try again")
		}
		if err != nil || !ok {
			t.Fatalf("seed %s: %v, %v", r.id, ok, err)
		}
	}
}

var mixed = []seedRow{
	{id: "d1", eventType: "Paid", aggType: "Order", status: core.StatusDead},
	{id: "n1", eventType: "Paid", aggType: "Order", status: core.StatusNew},
	{id: "d2", eventType: "Shipped", aggType: "Order", status: core.StatusDead},
	{id: "x1", eventType: "Paid", aggType: "Order", status: core.StatusDone},
	{id: "d3", eventType: "Paid", aggType: "Invoice", status: core.StatusDead, payload: `{"card":"s3cr3t-4242"}`},
	{id: "r1", eventType: "Paid", aggType: "Order", status: core.StatusRetry},
	{id: "d4", eventType: "Paid", aggType: "Order", status: core.StatusDead},
}

// server is a console on tg behind an httptest server, with a client that
// keeps cookies and does not follow redirects.
type server struct {
	t      *testing.T
	url    string
	client *http.Client
}

func newServer(t *testing.T, tg testdb.Target, cfg console.Config) *server {
	t.Helper()
	cfg.DB, cfg.Store = tg.DB, tg.Store
	c, err := console.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Mounted under a prefix, as a service would: the links are relative.
	mux := http.NewServeMux()
	mux.Handle("/ops/outbox/", http.StripPrefix("/ops/outbox", c))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &server{t: t, url: ts.URL + "/ops/outbox/", client: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

type response struct {
	status int
	body   string
	header http.Header
}

func (s *server) do(req *http.Request) response {
	s.t.Helper()
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return response{resp.StatusCode, string(b), resp.Header}
}

func (s *server) get(path string) response {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.url+path, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	return s.do(req)
}

func (s *server) post(path string, form url.Values, header ...string) response {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return s.do(req)
}

var tokenRE = regexp.MustCompile(`name="csrf_token" value="([^"]+)"`)

// token loads the dead-event list and returns the CSRF token of its forms
// (the client keeps the cookie it belongs to).
func (s *server) token() string {
	s.t.Helper()
	r := s.get("dead")
	m := tokenRE.FindStringSubmatch(r.body)
	if m == nil {
		s.t.Fatalf("no CSRF token on the dead-event page (status %d)", r.status)
	}
	return m[1]
}

func status(t *testing.T, tg testdb.Target, id string) core.Status {
	t.Helper()
	ev, err := tg.Store.Get(testCtx(t), tg.DB, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return ev.Status
}

func wantStatus(t *testing.T, r response, code int, contains ...string) {
	t.Helper()
	if r.status != code {
		t.Fatalf("status %d, want %d; body:\n%s", r.status, code, r.body)
	}
	for _, c := range contains {
		if !strings.Contains(r.body, c) {
			t.Errorf("response %d does not contain %q; body:\n%s", code, c, r.body)
		}
	}
}

func TestOverview(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, mixed...)
		s := newServer(t, tg, console.Config{Title: "billing"})
		r := s.get("")
		wantStatus(t, r, http.StatusOK, "billing", `id="count-new">1<`, `id="count-retry">1<`,
			`id="count-dead"><a href="dead">4</a>`, `id="count-done">1<`, `id="blocked-keys"`, "read-only")
		// The oldest pending row is n1, created base+1s, three days ago.
		if !regexp.MustCompile(`id="oldest-age">(2d23h59m|3d)`).MatchString(r.body) {
			t.Errorf("oldest pending age not about three days:\n%s", r.body)
		}
		// By type: Invoice/Paid has 1 dead; Order/Paid 1 new, 1 retry, 2 dead;
		// Order/Shipped 1 dead.
		rows := regexp.MustCompile(`<tr>\s*<td>([^<]*)</td><td>([^<]*)</td>\s*<td class="num">(\d+)</td><td class="num">(\d+)</td>`).
			FindAllStringSubmatch(r.body, -1)
		var got []string
		for _, m := range rows {
			got = append(got, strings.Join(m[1:], " "))
		}
		want := []string{"Invoice Paid 0 0", "Order Paid 1 1", "Order Shipped 0 0"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("by-type rows = %q, want %q", got, want)
		}
		if !strings.Contains(r.body, `href="dead?type=Paid&amp;aggregate=Order">2</a>`) {
			t.Errorf("no link to the 2 dead Order/Paid events:\n%s", r.body)
		}
		if got := r.header.Get("Content-Security-Policy"); !strings.Contains(got, "default-src 'none'") {
			t.Errorf("Content-Security-Policy = %q", got)
		}
	})
}

// TestBlockedKeys: on an ordered store, a key whose head went DEAD is listed
// on the overview with its dead head, the events waiting behind it and the
// error.
func TestBlockedKeys(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		ctx := testCtx(t)
		w, err := core.NewWriter(core.WriterConfig{Store: tg.Ordered})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := range 3 {
			env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("Placed"), AggregateType: core.AggregateName("Order"),
				AggregateID: "order-7", JSON: []byte(fmt.Sprintf(`{"n":%d}`, i))})
			if err != nil {
				t.Fatal(err)
			}
			tx, err := tg.DB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.WriteTx(ctx, tx, env); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, env.ID())
		}
		claimed, _, err := tg.Ordered.Claim(ctx, tg.DB, core.ClaimParams{Owner: "w", Now: time.Now(), LeaseTimeout: time.Minute, Limit: 10})
		if err != nil || len(claimed) != 1 || claimed[0].ID() != ids[0] {
			t.Fatalf("claimed %v, %v; want the head %s alone", claimed, err, ids[0])
		}
		if ok, _, err := tg.Ordered.(core.OrderedStore).MarkDeadOrdered(ctx, tg.DB, "w", ids[0], time.Now(), "bad <address>"); !ok || err != nil {
			t.Fatalf("mark dead: %v %v", ok, err)
		}
		tg.Store = tg.Ordered
		r := newServer(t, tg, console.Config{}).get("")
		wantStatus(t, r, http.StatusOK, `<table id="blocked-keys">`, "order-7", `href="event?id=`+ids[0]+`"`,
			`<td class="num">2</td>`, "bad &lt;address&gt;")
	})
}

func TestDeadListFilters(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, mixed...)
		s := newServer(t, tg, console.Config{})
		listed := regexp.MustCompile(`<tr data-id="([^"]+)">`)
		for _, tc := range []struct {
			query string
			want  string
			count string
		}{
			{"", "d1 d2 d3 d4", "<strong>4</strong> dead events match"},
			{"?type=Paid", "d1 d3 d4", "<strong>3</strong>"},
			{"?aggregate=Order", "d1 d2 d4", "<strong>3</strong>"},
			{"?type=Paid&aggregate=Order", "d1 d4", "<strong>2</strong>"},
			{"?limit=2", "d1 d2", "<strong>4</strong> dead events match; showing the oldest 2"},
			{"?type=Refunded", "", "<strong>0</strong>"},
		} {
			r := s.get("dead" + tc.query)
			wantStatus(t, r, http.StatusOK, tc.count)
			var ids []string
			for _, m := range listed.FindAllStringSubmatch(r.body, -1) {
				ids = append(ids, m[1])
			}
			if got := strings.Join(ids, " "); got != tc.want {
				t.Errorf("dead%s lists %q, want %q", tc.query, got, tc.want)
			}
		}
		r := s.get("dead?type=Shipped")
		wantStatus(t, r, http.StatusOK, "listener failed: d2", `href="event?id=d2"`)
		// Read-only: no forms that change anything.
		if strings.Contains(r.body, `method="post"`) || strings.Contains(r.body, "Replay all") {
			t.Errorf("read-only console offers a replay:\n%s", r.body)
		}
	})
}

func TestBadInputGets400(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, mixed[:1]...)
		s := newServer(t, tg, console.Config{AllowWrites: true})
		for _, tc := range []struct {
			path string
			code int
			msg  string
		}{
			{"dead?limit=abc", 400, `parameter limit: &#34;abc&#34; is not a whole number from 1 to 1000`},
			{"dead?limit=0", 400, "parameter limit"},
			{"dead?limit=5000", 400, "parameter limit"},
			{"dead?type=" + strings.Repeat("x", 129), 400, "parameter type: is 129 bytes long, more than 128"},
			{"dead?aggregate=a%00b", 400, "parameter aggregate: contains control characters"},
			{"dead?type=%ff", 400, "parameter type: contains control characters or invalid UTF-8"},
			{"dead?type=A&type=B", 400, "parameter type: given 2 times"},
			{"replay-all?limit=-1", 400, "parameter limit"},
			{"event", 400, "parameter id: is missing"},
			{"event?id=" + strings.Repeat("9", 37), 400, "parameter id: is 37 bytes long, more than 36"},
			{"event?id=nope", 404, "no event with id &#34;nope&#34;"},
			{"purge?older-than=soon", 400, "parameter older-than: &#34;soon&#34; is not a positive duration"},
			{"purge?older-than=-1h", 400, "parameter older-than"},
			{"purge?dead-older-than=0s", 400, "parameter dead-older-than"},
			{"no/such/page", 404, "no such page: /no/such/page"},
			{"replay", 405, ""},
		} {
			r := s.get(tc.path)
			if r.status != tc.code || !strings.Contains(r.body, tc.msg) {
				t.Errorf("GET %s = %d, want %d with %q; body:\n%s", tc.path, r.status, tc.code, tc.msg, r.body)
			}
		}
		tok := s.token()
		for _, tc := range []struct {
			path string
			form url.Values
			msg  string
		}{
			{"replay", url.Values{}, "parameter id: is missing"},
			{"replay", url.Values{"id": {"d1"}, "limit": {"x"}}, "parameter limit"},
			{"replay-all", url.Values{}, "parameter confirmed"},
			{"replay-all", url.Values{"confirmed": {"-3"}}, "parameter confirmed"},
		} {
			tc.form.Set("csrf_token", tok)
			r := s.post(tc.path, tc.form)
			if r.status != 400 || !strings.Contains(r.body, tc.msg) {
				t.Errorf("POST %s %v = %d, want 400 with %q; body:\n%s", tc.path, tc.form, r.status, tc.msg, r.body)
			}
		}
		if status(t, tg, "d1") != core.StatusDead {
			t.Error("a bad request changed d1")
		}
	})
}

func TestReadOnlyRefusesWrites(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, mixed...)
		// A token made by a console with writes enabled and the same key, so
		// that only the read-only setting can refuse.
		key := []byte(strings.Repeat("k", 32))
		ro := newServer(t, tg, console.Config{CSRFKey: key})
		rw := newServer(t, tg, console.Config{CSRFKey: key, AllowWrites: true})
		tok := rw.token()
		ro.client.Jar = rw.client.Jar
		for _, tc := range []struct {
			path string
			form url.Values
		}{
			{"replay", url.Values{"id": {"d1"}, "csrf_token": {tok}}},
			{"replay-all", url.Values{"confirmed": {"4"}, "csrf_token": {tok}}},
		} {
			r := ro.post(tc.path, tc.form)
			wantStatus(t, r, http.StatusForbidden, "this console is read-only")
		}
		for _, id := range []string{"d1", "d2", "d3", "d4"} {
			if st := status(t, tg, id); st != core.StatusDead {
				t.Errorf("%s is %v after refused writes", id, st)
			}
		}
		r := ro.get("replay-all")
		wantStatus(t, r, http.StatusOK)
		if strings.Contains(r.body, "<form method=\"post\"") || strings.Contains(r.body, "csrf_token") {
			t.Errorf("read-only confirmation page has a form") // it may be reached by URL
		}
	})
}

func TestCSRF(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, mixed...)
		s := newServer(t, tg, console.Config{AllowWrites: true})
		other := newServer(t, tg, console.Config{AllowWrites: true})
		tok := s.token()
		otherTok := other.token() // valid for other's cookie and key only

		refused := func(name string, r response) {
			t.Helper()
			if r.status != http.StatusForbidden {
				t.Errorf("%s: status %d, want 403; body:\n%s", name, r.status, r.body)
			}
		}
		replay := func(token string) url.Values { return url.Values{"id": {"d1"}, "csrf_token": {token}} }
		refused("no token", s.post("replay", url.Values{"id": {"d1"}}))
		refused("wrong token", s.post("replay", replay("AAAA")))
		refused("token of another console", s.post("replay", replay(otherTok)))
		refused("cross-site request with the right token",
			s.post("replay", replay(tok), "Sec-Fetch-Site", "cross-site"))
		refused("cross-origin request with the right token",
			s.post("replay", replay(tok), "Origin", "https://evil.example"))
		noCookie := &server{t: t, url: s.url, client: &http.Client{}}
		refused("right token, no cookie", noCookie.post("replay", replay(tok)))
		if st := status(t, tg, "d1"); st != core.StatusDead {
			t.Fatalf("a refused request changed d1 to %v", st)
		}

		// The right token with its cookie, from the same origin.
		r := s.post("replay", replay(tok), "Sec-Fetch-Site", "same-origin")
		if loc := r.header.Get("Location"); r.status != http.StatusSeeOther || loc != "dead?replayed=d1" {
			t.Fatalf("replay: status %d, Location %q; want 303 to dead?replayed=d1", r.status, loc)
		}
		if st := status(t, tg, "d1"); st != core.StatusNew {
			t.Fatalf("d1 is %v after replay, want NEW", st)
		}
		r = s.get("dead?replayed=d1")
		wantStatus(t, r, http.StatusOK, "Replayed d1: it is NEW again")
		if strings.Contains(r.body, `data-id="d1"`) {
			t.Error("d1 still listed after its replay")
		}
		// Replaying it again: no longer DEAD, nothing changes.
		r = s.post("replay", replay(tok))
		if loc := r.header.Get("Location"); loc != "dead?not-replayed=d1" {
			t.Errorf("second replay redirects to %q", loc)
		}
	})
}

func TestReplayAllConfirms(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, mixed...)
		s := newServer(t, tg, console.Config{AllowWrites: true, ReplayBatchSize: 1})
		r := s.get("dead?type=Paid")
		wantStatus(t, r, http.StatusOK, `href="replay-all?type=Paid"`)
		r = s.get("replay-all?type=Paid")
		wantStatus(t, r, http.StatusOK, "This moves <strong>3</strong> dead events", `name="confirmed" value="3"`,
			`name="type" value="Paid"`)
		// Nothing changed by looking at the confirmation.
		if n := countDead(t, tg); n != 4 {
			t.Fatalf("%d dead after the confirmation page, want 4", n)
		}
		tok := tokenRE.FindStringSubmatch(r.body)[1]
		// Confirmed 2 of them (say two more died since the page was shown:
		// only as many as were confirmed are replayed, oldest first).
		r = s.post("replay-all", url.Values{"type": {"Paid"}, "confirmed": {"2"}, "csrf_token": {tok}})
		if loc := r.header.Get("Location"); r.status != http.StatusSeeOther || loc != "dead?replayed-all=2&type=Paid" {
			t.Fatalf("replay-all: %d, Location %q", r.status, loc)
		}
		for id, want := range map[string]core.Status{"d1": core.StatusNew, "d3": core.StatusNew,
			"d4": core.StatusDead, "d2": core.StatusDead} {
			if st := status(t, tg, id); st != want {
				t.Errorf("%s is %v, want %v", id, st, want)
			}
		}
		wantStatus(t, s.get("dead?replayed-all=2&type=Paid"), http.StatusOK, "Replayed 2 events")
		r = s.post("replay-all", url.Values{"confirmed": {"0"}, "csrf_token": {tok}})
		if r.status != http.StatusSeeOther || countDead(t, tg) != 2 {
			t.Errorf("confirmed=0: status %d, %d dead; want 303 and nothing replayed", r.status, countDead(t, tg))
		}
	})
}

func countDead(t *testing.T, tg testdb.Target) int64 {
	t.Helper()
	n, err := tg.Store.CountDead(testCtx(t), tg.DB, core.DeadFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPayloadsHiddenUnlessEnabled(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, mixed...)
		const secret = "s3cr3t-4242"
		hidden := newServer(t, tg, console.Config{})
		for _, path := range []string{"", "dead", "dead?aggregate=Invoice", "event?id=d3"} {
			r := hidden.get(path)
			wantStatus(t, r, http.StatusOK)
			if strings.Contains(r.body, secret) {
				t.Errorf("%q shows the payload while payloads are hidden", path)
			}
		}
		wantStatus(t, hidden.get("event?id=d3"), http.StatusOK, `id="payload-hidden"`, "Hidden (22 bytes)",
			"listener failed: d3", "00-trace-d3", "DEAD")
		shown := newServer(t, tg, console.Config{ShowPayloads: true})
		wantStatus(t, shown.get("event?id=d3"), http.StatusOK, `<pre id="payload">{
  &#34;card&#34;: &#34;s3cr3t-4242&#34;
}</pre>`, "shown as JSON")
		// The list never shows payloads, even when enabled.
		if r := shown.get("dead"); strings.Contains(r.body, secret) {
			t.Error("the dead-event list shows a payload")
		}
	})
}

func TestPurgeDryRunDeletesNothing(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, mixed...) // x1 finished 48h ago; the DEAD rows just now
		s := newServer(t, tg, console.Config{})
		wantStatus(t, s.get("purge"), http.StatusOK, `id="purge-done">0<`, `id="purge-dead">0<`, `value="7d"`)
		wantStatus(t, s.get("purge?older-than=1d"), http.StatusOK, `id="purge-done">1<`, `id="purge-dead">0<`)
		wantStatus(t, s.get("purge?older-than=1d&dead-older-than=1ms"), http.StatusOK, `id="purge-done">1<`, `id="purge-dead">4<`)
		wantStatus(t, s.get("purge?older-than=36h&dead-older-than=1ms&keep-dead=1"), http.StatusOK,
			`id="purge-done">1<`, `id="purge-dead">–<`, "dead kept")
		if st := status(t, tg, "x1"); st != core.StatusDone {
			t.Errorf("x1 is %v after a dry run", st)
		}
		if n := countDead(t, tg); n != 4 {
			t.Errorf("%d dead after a dry run, want 4", n)
		}
	})
}

func TestMarkupIsEscaped(t *testing.T) {
	tg := testdb.SQLite(t)
	seed(t, tg, seedRow{id: "x<b>", eventType: "<script>alert(1)</script>", aggType: "Order", status: core.StatusDead})
	s := newServer(t, tg, console.Config{AllowWrites: true})
	for _, path := range []string{"", "dead", "event?id=" + url.QueryEscape("x<b>")} {
		r := s.get(path)
		wantStatus(t, r, http.StatusOK)
		if strings.Contains(r.body, "<script>") || strings.Contains(r.body, "x<b>") {
			t.Errorf("%q renders markup from the data:\n%s", path, r.body)
		}
	}
}

func TestNewValidates(t *testing.T) {
	tg := testdb.SQLite(t)
	for _, tc := range []struct {
		name string
		cfg  console.Config
		msg  string
	}{
		{"no DB", console.Config{Store: tg.Store}, "DB is nil"},
		{"no store", console.Config{DB: tg.DB}, "Store is nil"},
		{"page size", console.Config{DB: tg.DB, Store: tg.Store, PageSize: 5000}, "PageSize is 5000, more than 1000"},
		{"negative page size", console.Config{DB: tg.DB, Store: tg.Store, PageSize: -1}, "PageSize is negative"},
		{"short key", console.Config{DB: tg.DB, Store: tg.Store, CSRFKey: []byte("short")}, "CSRFKey has 5 bytes"},
		{"retention", console.Config{DB: tg.DB, Store: tg.Store, PurgeRetention: -time.Hour}, "PurgeRetention is negative"},
		{"no inspector", console.Config{DB: tg.DB, Store: bareStore{tg.Store}}, "does not implement core.Inspector"},
	} {
		_, err := console.New(tc.cfg)
		if !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v, want core.ErrInvalid with %q", tc.name, err, tc.msg)
		}
	}
}

// bareStore hides every optional capability of the store it wraps.
type bareStore struct{ core.Store }
