package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"
)

// testServers returns the configured servers; without either DSN the test
// skips naming the variables, and under OUTBOX_REQUIRE_DBS=1 it fails.
func testServers(t *testing.T) []*server {
	t.Helper()
	srvs, notes := servers("postgres,mysql")
	if len(notes) > 0 && os.Getenv("OUTBOX_REQUIRE_DBS") == "1" {
		t.Fatalf("OUTBOX_REQUIRE_DBS=1: %s", strings.Join(notes, "; "))
	}
	for _, n := range notes {
		t.Log(n)
	}
	if len(srvs) == 0 {
		t.Skip("set OUTBOX_POSTGRES_DSN and/or OUTBOX_MYSQL_DSN to run the comparison's contenders")
	}
	return srvs
}

// TestEveryContenderDeliversOnce runs a tiny W1 and W2 through every
// contender and checks that each event reached a consumer exactly once and
// that latencies were measured.
func TestEveryContenderDeliversOnce(t *testing.T) {
	srvs := testServers(t)
	c, err := parseFlags([]string{"-w1-events", "40", "-w2-events", "60", "-writers", "4", "-timeout", "20s", "-grace", "50ms", "-poll", "5ms", "-river-workers", "10"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, srv := range srvs {
		for _, k := range kinds(c) {
			if k.pgOnly && !srv.pg() {
				continue
			}
			t.Run(srv.name+"/"+k.name, func(t *testing.T) {
				c := *c
				if strings.HasPrefix(k.name, "watermill") && !srv.pg() {
					// watermill-sql's MySQL subscriber reads by
					// auto-increment offset, so concurrent writers whose
					// rows commit out of order can be skipped (the
					// benchmark reports it as "stalled"); one writer keeps
					// this test about delivery, not about that.
					c.writers = 1
				}
				var o outcome
				if err := runW1(ctx, &c, srv, k, &o); err != nil {
					t.Fatalf("W1: %v", err)
				}
				if o.W1Error != "" || o.W1PerSec <= 0 {
					t.Fatalf("W1: %q, %.0f ev/s", o.W1Error, o.W1PerSec)
				}
				if !k.noConsum && o.P99Ms <= 0 {
					t.Errorf("W1 latency not measured: %+v", o)
				}
				if !k.noW2 {
					if err := runW2(ctx, &c, srv, k, &o); err != nil {
						t.Fatalf("W2: %v", err)
					}
					if o.W2Error != "" || o.W2PerSec <= 0 {
						t.Fatalf("W2: %q, %.0f ev/s", o.W2Error, o.W2PerSec)
					}
				}
				if o.Duplicates != 0 {
					t.Errorf("%d duplicates", o.Duplicates)
				}
			})
		}
	}
}

func TestRecorder(t *testing.T) {
	r := newRecorder(3)
	r.commit(0)
	r.deliver(0)
	r.deliver(1) // before its commit: latency 0
	r.commit(1)
	r.deliver(0)
	r.deliver(7)
	if got := r.delivered.Load(); got != 2 {
		t.Fatalf("delivered %d, want 2", got)
	}
	if r.extra.Load() != 1 || r.unknown.Load() != 1 {
		t.Fatalf("extra %d unknown %d, want 1 and 1", r.extra.Load(), r.unknown.Load())
	}
	if r.wait(context.Background(), time.Millisecond) {
		t.Fatal("wait reported all delivered with one missing")
	}
	r.deliver(2)
	if !r.wait(context.Background(), time.Second) {
		t.Fatal("wait did not see every event delivered")
	}
	lat := r.latencies()
	if len(lat) != 2 || lat[0] != 0 {
		t.Fatalf("latencies %v: want two, the first 0", lat)
	}
}

func TestParseFlagsRejectsBadSizes(t *testing.T) {
	for _, args := range [][]string{{"-w1-events", "0"}, {"-poll", "0s"}, {"-writers", "-1"}} {
		if _, err := parseFlags(args); err == nil || !strings.Contains(err.Error(), "must") {
			t.Errorf("%v: err %v, want a message naming the flag", args, err)
		}
	}
}

// TestPerEvent: the CPU between two marks is divided by the events; a
// backend that appeared between them counts whole, one that is gone not.
func TestPerEvent(t *testing.T) {
	a := cpuMark{self: time.Second, allocs: 500, db: map[int]time.Duration{1: time.Second, 2: time.Second}}
	b := cpuMark{self: 3 * time.Second, allocs: 100500, db: map[int]time.Duration{1: 2 * time.Second, 3: time.Second}}
	goUs, dbUs, allocs := perEvent(a, b, 1000)
	if goUs != 2000 || dbUs != 2000 || allocs != 100 {
		t.Errorf("perEvent = %v / %v µs, %v allocs, want 2000 / 2000, 100", goUs, dbUs, allocs)
	}
	if goUs, dbUs, allocs := perEvent(a, b, 0); goUs != 0 || dbUs != 0 || allocs != 0 {
		t.Errorf("perEvent of no events = %v / %v, %v, want zeros", goUs, dbUs, allocs)
	}
}

// TestMedians folds rounds into medians, ranges and sums, and leaves a
// single round as it was.
func TestMedians(t *testing.T) {
	rounds := []outcome{
		{Contender: "a", DB: "postgres", Round: 1, W1PerSec: 100, W2PerSec: 10, P99Ms: 3, Duplicates: 1},
		{Contender: "b", DB: "postgres", Round: 1, W1PerSec: 7, W1Error: "stalled"},
		{Contender: "a", DB: "postgres", Round: 2, W1PerSec: 300, W2PerSec: 0, P99Ms: 1, W2Error: "failed"},
		{Contender: "a", DB: "postgres", Round: 3, W1PerSec: 200, W2PerSec: 30, P99Ms: 2, Duplicates: 2},
	}
	got := medians(rounds)
	if len(got) != 2 || got[0].Contender != "a" || got[1].Contender != "b" {
		t.Fatalf("medians: %+v", got)
	}
	a, b := got[0], got[1]
	if a.Rounds != 3 || a.W1PerSec != 200 || a.W1Range != [2]float64{100, 300} || a.P99Ms != 2 || a.Duplicates != 3 {
		t.Errorf("a: %d rounds, W1 %v %v, p99 %v, %d duplicates; want 3, 200 [100 300], 2, 3", a.Rounds, a.W1PerSec, a.W1Range, a.P99Ms, a.Duplicates)
	}
	if a.W2PerSec != 20 || a.W2Range != [2]float64{10, 30} || a.W2Error != "round 2: failed" {
		t.Errorf("a: W2 %v %v %q; want 20 (the rounds that measured it), [10 30], the failed round named", a.W2PerSec, a.W2Range, a.W2Error)
	}
	if b.Rounds != 1 || b.W1PerSec != 7 || b.W1Error != "stalled" || spread(&b, b.W1Range) != "" {
		t.Errorf("b: %+v; want the single round unchanged, no range", b)
	}
	if s := spread(&a, a.W1Range); s != " [100-300]" {
		t.Errorf("spread %q", s)
	}
}
