package prometheus

import (
	"context"
	"errors"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

func newSampler(t *testing.T, cfg SamplerConfig) *Sampler {
	t.Helper()
	if cfg.Metrics.Registerer == nil {
		cfg.Metrics.Registerer = prom.NewRegistry()
	}
	s, err := NewSampler(cfg)
	if err != nil {
		t.Fatalf("NewSampler: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// seed writes events created at the given times in the given states.
func seed(t *testing.T, tg testdb.Target, created time.Time, states ...core.Status) {
	t.Helper()
	ctx := testCtx(t)
	for i, st := range states {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: name("Seeded"),
			OccurredAt: created.Add(time.Duration(i) * time.Second), JSON: []byte(`{}`)})
		must(t, err)
		opts := core.InsertOptions{}
		if st != core.StatusNew {
			opts = core.InsertOptions{LeaseOwner: "seeder", LeaseAt: time.Now()}
		}
		must(t, tg.Store.Insert(ctx, tg.DB, []core.Envelope{env}, opts))
		switch st {
		case core.StatusRetry:
			_, err = tg.Store.MarkRetry(ctx, tg.DB, "seeder", env.ID(), time.Now().Add(time.Hour), "x")
		case core.StatusDone:
			_, err = tg.Store.MarkDone(ctx, tg.DB, "seeder", env.ID(), time.Now())
		case core.StatusDead:
			_, err = tg.Store.MarkDead(ctx, tg.DB, "seeder", env.ID(), time.Now(), "x")
		}
		must(t, err)
	}
}

func TestSamplerCounts(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		now := time.Now().UTC().Truncate(time.Second)
		s := newSampler(t, SamplerConfig{DB: tg.DB, Store: inspector(t, tg),
			Now: func() time.Time { return now }})
		ctx := testCtx(t)
		must(t, s.SampleOnce(ctx))
		for g, want := range map[prom.Gauge]float64{s.pending: 0, s.retrying: 0, s.dead: 0, s.oldestAge: 0} {
			if got := testutil.ToFloat64(g); got != want {
				t.Errorf("empty table: gauge = %v, want %v", got, want)
			}
		}

		// The oldest pending row is the RETRY one, created 90 s ago; DONE
		// and DEAD rows older still do not count.
		seed(t, tg, now.Add(-10*time.Minute), core.StatusDone, core.StatusDead)
		seed(t, tg, now.Add(-90*time.Second), core.StatusRetry, core.StatusNew, core.StatusDead, core.StatusNew,
			core.StatusDead)
		must(t, s.SampleOnce(ctx))
		for what, c := range map[string]struct {
			g    prom.Gauge
			want float64
		}{
			"pending":    {s.pending, 2},
			"retrying":   {s.retrying, 1},
			"dead":       {s.dead, 3},
			"oldest age": {s.oldestAge, 90},
			"last":       {s.lastSample, float64(now.Unix())},
		} {
			if got := testutil.ToFloat64(c.g); got != c.want {
				t.Errorf("%s = %v, want %v", what, got, c.want)
			}
		}
	})
}

func TestSamplerErrorsAreCounted(t *testing.T) {
	tg := testdb.SQLite(t)
	db := tg.Reopen(t)
	must(t, db.Close())
	s := newSampler(t, SamplerConfig{DB: db, Store: inspector(t, tg)})
	if err := s.SampleOnce(testCtx(t)); err == nil {
		t.Fatal("SampleOnce on a closed pool: no error")
	}
	if got := testutil.ToFloat64(s.errors); got != 1 {
		t.Errorf("sample_errors_total = %v, want 1", got)
	}
}

func TestSamplerLifecycle(t *testing.T) {
	tg := testdb.SQLite(t)
	seed(t, tg, time.Now().Add(-time.Minute), core.StatusDead)
	s := newSampler(t, SamplerConfig{DB: tg.DB, Store: inspector(t, tg)})
	sampled := make(chan error, 1)
	s.afterSample = func(err error) { sampled <- err }
	ctx := testCtx(t)
	must(t, s.Start(ctx))
	if err := s.Start(ctx); !errors.Is(err, core.ErrAlreadyStarted) {
		t.Errorf("second Start = %v, want core.ErrAlreadyStarted", err)
	}
	if err := <-sampled; err != nil {
		t.Errorf("first background sample: %v", err)
	}
	if got := testutil.ToFloat64(s.dead); got != 1 {
		t.Errorf("dead gauge after the first background sample = %v", got)
	}
	must(t, s.Close(ctx))
	must(t, s.Close(ctx))
	select {
	case <-s.loop.Done():
	default:
		t.Error("Close returned before the loop exited")
	}
	if err := s.Start(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("Start after Close = %v, want core.ErrClosed", err)
	}
	if err := s.SampleOnce(ctx); !errors.Is(err, core.ErrClosed) {
		t.Errorf("SampleOnce after Close = %v, want core.ErrClosed", err)
	}
}

func TestSamplerStopsWhenStartContextIsCancelled(t *testing.T) {
	tg := testdb.SQLite(t)
	s := newSampler(t, SamplerConfig{DB: tg.DB, Store: inspector(t, tg)})
	ctx, cancel := context.WithCancel(context.Background())
	must(t, s.Start(ctx))
	cancel()
	select {
	case <-s.loop.Done():
	case <-testCtx(t).Done():
		t.Fatal("sampler still running after its context was cancelled")
	}
}

func TestSamplerConfig(t *testing.T) {
	tg := testdb.SQLite(t)
	reg := prom.NewRegistry()
	insp := inspector(t, tg)
	for what, cfg := range map[string]SamplerConfig{
		"no registerer":     {DB: tg.DB, Store: insp},
		"no db":             {Metrics: Config{Registerer: reg}, Store: insp},
		"no store":          {Metrics: Config{Registerer: reg}, DB: tg.DB},
		"negative interval": {Metrics: Config{Registerer: reg}, DB: tg.DB, Store: insp, Interval: -1},
		"negative timeout":  {Metrics: Config{Registerer: reg}, DB: tg.DB, Store: insp, QueryTimeout: -1},
	} {
		if _, err := NewSampler(cfg); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%s: NewSampler = %v, want core.ErrInvalid", what, err)
		}
	}
}

func inspector(t *testing.T, tg testdb.Target) core.Inspector {
	t.Helper()
	insp, ok := core.StoreAs[core.Inspector](tg.Store)
	if !ok {
		t.Fatalf("%T does not implement core.Inspector", tg.Store)
	}
	return insp
}
