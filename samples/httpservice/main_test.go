package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/postgres"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const waitFor = 30 * time.Second

// logWriter collects the service's JSON log lines and hands over the
// address of the "listening" line.
type logWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	addrc chan string
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	var line struct{ Message, Addr string }
	if json.Unmarshal(p, &line) == nil && line.Message == "listening" {
		w.addrc <- line.Addr
	}
	return len(p), nil
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestService runs the service in-process against the real PostgreSQL and
// drives it over HTTP: orders in, emails out, metrics, clean shutdown.
func TestService(t *testing.T) {
	dsn := os.Getenv(testdb.PostgresEnv)
	if dsn == "" {
		msg := "httpservice test: set " + testdb.PostgresEnv + "=" + defaultDSN + " to run"
		if testdb.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	table := testdb.UniqueName("httpsvc")
	t.Cleanup(func() { dropTables(t, dsn, table) })
	c, shutdown := serve(t, "-dsn", dsn, "-addr", "127.0.0.1:0", "-table", table)

	// Bad input: 400, nothing written.
	for _, body := range []string{`{bad`, `{"customer":"ada@example.com","total_cents":1}{}`,
		`{"customer":"ada@example.com","total_cents":1,"coupon":"X"}`, `{"customer":"ada","total_cents":1}`,
		`{"customer":"ada@example.com","total_cents":0}`} {
		if code, resp := c.do("POST", "/orders", body); code != http.StatusBadRequest || resp["error"] == "" {
			t.Errorf("POST %s: %d %v, want 400 with an error", body, code, resp)
		}
	}
	if code, _ := c.do("GET", "/orders/nope", ""); code != http.StatusNotFound {
		t.Errorf("GET unknown order: %d, want 404", code)
	}
	if code, _ := c.do("POST", "/orders/nope/cancel", ""); code != http.StatusNotFound {
		t.Errorf("cancel unknown order: %d, want 404", code)
	}

	// Orders in; one customer's mail server fails once.
	customers := []string{"ada@example.com", "bob@example.com", "cy@flaky.example", "dee@example.com", "eve@example.com"}
	ids := make([]string, len(customers))
	for i, cust := range customers {
		code, resp := c.do("POST", "/orders", fmt.Sprintf(`{"customer":%q,"total_cents":%d}`, cust, 1000+i))
		if code != http.StatusCreated || resp["id"] == "" || resp["event_id"] == "" {
			t.Fatalf("POST /orders: %d %v", code, resp)
		}
		ids[i] = resp["id"].(string)
	}
	for _, id := range ids {
		c.waitEmails(id, "Your order "+id+" is confirmed")
	}
	if code, resp := c.do("POST", "/orders/"+ids[0]+"/cancel", ""); code != http.StatusOK || resp["status"] != "cancelled" {
		t.Fatalf("cancel: %d %v", code, resp)
	}
	if code, _ := c.do("POST", "/orders/"+ids[0]+"/cancel", ""); code != http.StatusConflict {
		t.Errorf("second cancel: %d, want 409", code)
	}
	order := c.waitEmails(ids[0], "Your order "+ids[0]+" is confirmed", "Your order "+ids[0]+" is cancelled")
	if order["status"] != "cancelled" || order["customer"] != customers[0] || order["total_cents"] != 1000.0 {
		t.Errorf("order after cancel: %v", order)
	}

	if code, resp := c.do("GET", "/healthz", ""); code != http.StatusOK || resp["status"] != "ok" {
		t.Errorf("healthz: %d %v", code, resp)
	}

	// Metrics: six deliveries, one retry, nothing dead. A delivery is
	// counted once its listener has returned, which can be just after the
	// e-mail it sent shows on the order: wait for the count.
	metrics := c.waitMetric(`outbox_dispatch_total{result="success"}`, 6)
	for series, want := range map[string]float64{
		`outbox_dispatch_total{result="success"}`: 6,
		`outbox_dispatch_total{result="failure"}`: 1,
		`outbox_dispatch_total{result="dead"}`:    0,
		`outbox_hot_enqueued_total`:               6,
		`outbox_store_errors_total`:               0,
	} {
		if got, ok := metrics[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	for _, series := range []string{"outbox_pending_events", "outbox_dead_events", "go_goroutines",
		"outbox_claim_duration_seconds_count", "outbox_writeback_duration_seconds_count"} {
		if _, ok := metrics[series]; !ok {
			t.Errorf("/metrics has no %s", series)
		}
	}
	// The latency histograms: seven listener calls (six deliveries and the
	// failed first attempt), each with its commit-to-delivery latency.
	if got := metrics["outbox_listener_duration_seconds_count"]; got != 7 {
		t.Errorf("outbox_listener_duration_seconds_count = %v, want 7", got)
	}
	hot, cold := metrics[`outbox_delivery_latency_seconds_count{queue="hot"}`], metrics[`outbox_delivery_latency_seconds_count{queue="cold"}`]
	if hot+cold != 7 || hot < 6 {
		t.Errorf("outbox_delivery_latency_seconds_count: hot %v, cold %v; want 7 in all, at least 6 hot", hot, cold)
	}

	shutdown()
}

// serve runs the service in-process with args until the returned shutdown
// is called, which stops it as SIGTERM would and checks that it stopped
// cleanly.
func serve(t *testing.T, args ...string) (c *apiClient, shutdown func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	logs := &logWriter{addrc: make(chan string, 1)}
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, logs) }()
	var base string
	select {
	case addr := <-logs.addrc:
		base = "http://" + addr
	case err := <-done:
		stop()
		t.Fatalf("run returned before listening: %v\n%s", err, logs)
	case <-time.After(waitFor):
		stop()
		t.Fatalf("service not listening after %s\n%s", waitFor, logs)
	}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	c = &apiClient{t: t, base: base, http: client}
	return c, func() {
		t.Helper()
		client.CloseIdleConnections()
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run: %v\n%s", err, logs)
			}
		case <-time.After(waitFor):
			t.Fatalf("no shutdown after %s\n%s", waitFor, logs)
		}
		if !strings.Contains(logs.String(), `"message":"stopped"`) {
			t.Errorf("no stopped line in the logs:\n%s", logs)
		}
	}
}

type apiClient struct {
	t    *testing.T
	base string
	http *http.Client
}

// do sends a request and decodes the JSON object it gets back.
func (c *apiClient) do(method, path, body string) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		c.t.Fatalf("%s %s: %d, body not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, v
}

// waitEmails polls GET /orders/{id} until the order lists the given email
// subjects, and returns it.
func (c *apiClient) waitEmails(id string, subjects ...string) map[string]any {
	c.t.Helper()
	end := time.Now().Add(waitFor)
	for {
		code, order := c.do("GET", "/orders/"+id, "")
		if code != http.StatusOK {
			c.t.Fatalf("GET /orders/%s: %d %v", id, code, order)
		}
		if fmt.Sprint(order["emails"]) == fmt.Sprint(subjects) {
			return order
		}
		if time.Now().After(end) {
			c.t.Fatalf("order %s: emails %v after %s, want %v", id, order["emails"], waitFor, subjects)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitMetric scrapes /metrics until series reaches want (or waitFor
// passes) and returns the last scrape.
func (c *apiClient) waitMetric(series string, want float64) map[string]float64 {
	c.t.Helper()
	end := time.Now().Add(waitFor)
	for {
		m := c.metrics()
		if m[series] >= want || time.Now().After(end) {
			return m
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// metrics scrapes /metrics into series -> value.
func (c *apiClient) metrics() map[string]float64 {
	c.t.Helper()
	resp, err := c.http.Get(c.base + "/metrics")
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("/metrics: %d %s", resp.StatusCode, body)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	if err := sc.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

func dropTables(t *testing.T, dsn, table string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := postgres.Open(dsn)
	if err != nil {
		t.Errorf("drop tables: %v", err)
		return
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s, %s, %s`,
		quoteIdent(table), quoteIdent(table+"_key"), quoteIdent(table+"_orders"), quoteIdent(table+"_emails"))); err != nil {
		t.Errorf("drop tables: %v", err)
	}
}
