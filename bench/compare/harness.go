package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
)

// server is one database the contenders run on.
type server struct {
	name  string // "postgres" or "mysql"
	dsn   string
	admin *sql.DB // PostgreSQL: lists this run's backends (markCPU)
}

func (s *server) pg() bool { return s.name == "postgres" }

// open returns a new pool of at most conns connections, as a separate
// process would have.
func (s *server) open(conns int) (*sql.DB, error) {
	var db *sql.DB
	var err error
	if s.pg() {
		db, err = postgres.Open(s.dsn)
	} else {
		db, err = mysql.Open(s.dsn)
	}
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	return db, nil
}

// rebind turns '?' markers into $n on PostgreSQL.
func (s *server) rebind(q string) string {
	if !s.pg() {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// bizDDL is the business table every W1 transaction inserts a row into.
func (s *server) bizDDL(name string) string {
	if s.pg() {
		return "CREATE TABLE " + name + " (id VARCHAR(36) PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount BIGINT NOT NULL, created_at TIMESTAMPTZ NOT NULL)"
	}
	return "CREATE TABLE " + name + " (id VARCHAR(36) PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount BIGINT NOT NULL, created_at DATETIME(6) NOT NULL) ENGINE = InnoDB"
}

// bizInsert is the business row's INSERT with '?' markers (rebind it).
func bizInsert(table string) string {
	return "INSERT INTO " + table + " (id, customer, amount, created_at) VALUES (?, ?, ?, ?)"
}

// bizArgs are the arguments of transaction i's business row.
func bizArgs(i int) []any {
	return []any{aggregateID(i), fmt.Sprintf("c-%05d", i%50000), 4200 + i%1000, time.Now().UTC()}
}

// uniqueName returns a table (or schema, or topic) name no other run uses.
func uniqueName(kind string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "cmp_" + kind + "_" + hex.EncodeToString(b[:])
}

// payload returns the ~200-byte JSON document of event i.
func payload(i int) []byte {
	p := fmt.Sprintf(`{"orderId":"o-%09d","customer":"c-%05d","amount":%d,"currency":"EUR",`+
		`"items":[{"sku":"sku-%03d","qty":2,"price":1200},{"sku":"sku-%03d","qty":1,"price":1800}],"note":"`,
		i, i%50000, 4200+i%1000, i%997, (i+1)%997)
	const size = 200
	if pad := size - len(p) - 2; pad > 0 {
		p += strings.Repeat("x", pad)
	}
	return []byte(p + `"}`)
}

// eventID is the id of event i: 26 digits, as long as a ULID, so that every
// consumer finds the event's number in what it receives.
func eventID(i int) string { return fmt.Sprintf("%026d", i) }

// eventNo parses an eventID; ok is false for anything else.
func eventNo(id string) (int, bool) {
	if len(id) != 26 {
		return 0, false
	}
	i, err := strconv.Atoi(id)
	return i, err == nil && i >= 0
}

// aggregateID is the aggregate id of event i, for the contenders whose
// event ids are their own.
func aggregateID(i int) string { return fmt.Sprintf("o-%09d", i) }

// aggregateNo parses an aggregateID; ok is false for anything else.
func aggregateNo(id string) (int, bool) {
	n, ok := strings.CutPrefix(id, "o-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil && i >= 0
}

// recorder is the consumer side of every contender: it counts deliveries,
// finds duplicates and notes when each event's transaction committed and
// when the event first reached a consumer.
type recorder struct {
	n         int
	start     time.Time
	committed []atomic.Int64 // ns since start + 1; 0 = not noted
	received  []atomic.Int64
	delivered atomic.Int64 // distinct events delivered
	extra     atomic.Int64 // deliveries of events already delivered
	unknown   atomic.Int64 // deliveries of numbers outside 0..n-1
	all       chan struct{}
	allOnce   sync.Once
}

func newRecorder(n int) *recorder {
	return &recorder{n: n, start: time.Now(), committed: make([]atomic.Int64, n),
		received: make([]atomic.Int64, n), all: make(chan struct{})}
}

func (r *recorder) since() int64 { return int64(time.Since(r.start)) + 1 }

// commit notes that transaction i's COMMIT has returned.
func (r *recorder) commit(i int) { r.committed[i].Store(r.since()) }

// deliver notes that event i reached a consumer.
func (r *recorder) deliver(i int) {
	if i < 0 || i >= r.n {
		r.unknown.Add(1)
		return
	}
	if !r.received[i].CompareAndSwap(0, r.since()) {
		r.extra.Add(1)
		return
	}
	if r.delivered.Add(1) == int64(r.n) {
		r.allOnce.Do(func() { close(r.all) })
	}
}

// wait returns when every event has been delivered (true), or when timeout
// passed or ctx ended first (false).
func (r *recorder) wait(ctx context.Context, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.all:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// lastDelivery returns when the last first-delivery happened.
func (r *recorder) lastDelivery() time.Time {
	var last int64
	for i := range r.received {
		last = max(last, r.received[i].Load())
	}
	return r.start.Add(time.Duration(last - 1))
}

// latencies returns the commit-to-consumer latency of every event whose
// commit and delivery were both noted, sorted. A delivery before the
// writer's COMMIT returned counts as 0.
func (r *recorder) latencies() []time.Duration {
	out := make([]time.Duration, 0, r.n)
	for i := range r.n {
		c, rc := r.committed[i].Load(), r.received[i].Load()
		if c != 0 && rc != 0 {
			out = append(out, time.Duration(max(rc-c, 0)))
		}
	}
	slices.Sort(out)
	return out
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// writeAll runs writers goroutines that take transaction numbers in turn
// until n are done, and returns the first error.
func writeAll(ctx context.Context, n, writers int, write func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range writers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := write(i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("transaction %d: %w", i, err)
					}
					mu.Unlock()
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
