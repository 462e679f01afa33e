package reliability

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/reliability/internal/chaos"
	"github.com/outboxkit/outbox/txctx"
)

// validSpec is an envelope spec that NewEnvelope accepts; bad-input cases
// break one thing in it.
func validSpec() core.EnvelopeSpec {
	return core.EnvelopeSpec{Type: chaos.EventType, AggregateType: chaos.Aggregate, AggregateID: "a-1", JSON: []byte(`{"ok":true}`)}
}

// badCase is one piece of bad input: run it, and it must fail with an error
// matching is (and, for a *core.ValidationError, naming field), and leave
// the table as it was.
type badCase struct {
	name  string
	run   func(ctx context.Context) error
	is    error
	field string // the ValidationError's Field; "" when the error is not one
}

// TestBadInput runs every bad input DESIGN.md section 2 item 9 names, and
// more, against a table holding a few events: each must get a clear error
// (a sentinel to match, naming what was wrong) and change nothing. The
// inputs the library accepts on purpose (exactly 1 MiB, a 10,000-event
// WriteAll) are checked to succeed, atomically and byte-exact. In position
// delivery the Writer inserts STREAM rows with positions (a WriterOnly
// Outbox's Writer), by another statement that must refuse the same inputs.
func TestBadInput(t *testing.T) {
	t.Parallel()
	forEachDialectDelivery(t, testdb.Dialects, func(t *testing.T, tg testdb.Target, dv delivery) {
		ctx := context.Background()
		w := deliveryWriter(t, dv, tg)
		txm, err := txctx.New(tg.DB, txctx.Config{})
		if err != nil {
			t.Fatal(err)
		}
		writeAll := func(ctx context.Context, envs ...core.Envelope) error {
			return txm.Do(ctx, func(ctx context.Context) error {
				_, err := w.WriteAll(ctx, envs)
				return err
			})
		}
		seed, seedIDs := chaosEnvs(t, 3, nil)
		if err := writeAll(ctx, seed...); err != nil {
			t.Fatal(err)
		}
		before := tableSnapshot(t, tg.DB, tg.Table)

		cases := envelopeCases()
		cases = append(cases, writerCases(t, tg, w, txm, writeAll, seedIDs[0])...)
		cases = append(cases, tableNameCases(tg)...)
		cases = append(cases, registryCases()...)
		for _, c := range cases {
			err := c.run(ctx)
			switch {
			case err == nil:
				t.Errorf("%s: no error", c.name)
			case !errors.Is(err, c.is):
				t.Errorf("%s: error %q does not match %v", c.name, err, c.is)
			case c.field != "":
				var ve *core.ValidationError
				if !errors.As(err, &ve) || ve.Field != c.field || !strings.Contains(err.Error(), c.field) {
					t.Errorf("%s: error %q does not name the field %q", c.name, err, c.field)
				}
			}
			if after := tableSnapshot(t, tg.DB, tg.Table); after != before {
				t.Fatalf("%s changed the table", c.name)
			}
			t.Logf("%-58s -> %.150v", c.name, err)
		}

		// Accepted on purpose.
		acceptedCases(t, tg, writeAll)
	})
}

func bigJSON(n int) []byte {
	// A JSON string of exactly n bytes: the quotes and n-2 letters.
	return []byte(`"` + strings.Repeat("a", n-2) + `"`)
}

func envelopeCases() []badCase {
	mod := func(name, field string, f func(*core.EnvelopeSpec)) badCase {
		return badCase{name: "envelope: " + name, is: core.ErrInvalid, field: field, run: func(context.Context) error {
			spec := validSpec()
			f(&spec)
			_, err := core.NewEnvelope(spec)
			return err
		}}
	}
	bigHeaders := map[string]string{}
	for i := range 700 {
		bigHeaders[fmt.Sprintf("k%04d", i)] = strings.Repeat("v", 90)
	}
	return []badCase{
		mod("empty event type", "event type", func(s *core.EnvelopeSpec) { s.Type = core.EventName("") }),
		mod("no event type", "event type", func(s *core.EnvelopeSpec) { s.Type = nil }),
		mod("event type of 129 bytes", "event type", func(s *core.EnvelopeSpec) { s.Type = core.EventName(strings.Repeat("t", 129)) }),
		mod("event type not UTF-8", "event type", func(s *core.EnvelopeSpec) { s.Type = core.EventName("Tick\xff") }),
		mod("aggregate type of 65 bytes", "aggregate type", func(s *core.EnvelopeSpec) { s.AggregateType = core.AggregateName(strings.Repeat("a", 65)) }),
		mod("bytes payload of 1 MiB + 1", "payload", func(s *core.EnvelopeSpec) { s.JSON, s.Bytes = nil, make([]byte, core.MaxPayloadBytes+1) }),
		mod("JSON payload of 1 MiB + 1", "payload", func(s *core.EnvelopeSpec) { s.JSON = bigJSON(core.MaxPayloadBytes + 1) }),
		mod("both JSON and bytes payload", "payload", func(s *core.EnvelopeSpec) { s.Bytes = []byte("x") }),
		mod("neither JSON nor bytes payload", "payload", func(s *core.EnvelopeSpec) { s.JSON = nil }),
		mod("JSON payload that is not JSON", "payload", func(s *core.EnvelopeSpec) { s.JSON = []byte(`{"a":`) }),
		mod("empty header key", "headers", func(s *core.EnvelopeSpec) { s.Headers = map[string]string{"": "v"} }),
		mod("header value of 64 KiB + 1", "headers", func(s *core.EnvelopeSpec) {
			s.Headers = map[string]string{"k": strings.Repeat("v", core.MaxHeaderBytes)}
		}),
		mod("700 headers of 95 bytes (over 64 KiB)", "headers", func(s *core.EnvelopeSpec) { s.Headers = maps.Clone(bigHeaders) }),
		mod("header key not UTF-8", "headers", func(s *core.EnvelopeSpec) { s.Headers = map[string]string{"k\xc3": "v"} }),
		mod("header value not UTF-8", "headers", func(s *core.EnvelopeSpec) { s.Headers = map[string]string{"k": "\xed\xa0\x80"} }),
		mod("event id not UTF-8", "event id", func(s *core.EnvelopeSpec) { s.ID = "id-\xff\xfe" }),
		mod("event id of 37 bytes", "event id", func(s *core.EnvelopeSpec) { s.ID = strings.Repeat("i", 37) }),
		mod("event id of 13 three-byte runes (39 bytes)", "event id", func(s *core.EnvelopeSpec) { s.ID = strings.Repeat("€", 13) }),
		mod("event id with a NUL byte", "event id", func(s *core.EnvelopeSpec) { s.ID = "id\x00x" }),
		mod("aggregate id not UTF-8", "aggregate id", func(s *core.EnvelopeSpec) { s.AggregateID = "\xc0\xaf" }),
		mod("aggregate id of 129 bytes", "aggregate id", func(s *core.EnvelopeSpec) { s.AggregateID = strings.Repeat("a", 129) }),
		mod("tenant id not UTF-8", "tenant id", func(s *core.EnvelopeSpec) { s.TenantID = "t\x80" }),
		mod("tenant id of 65 bytes", "tenant id", func(s *core.EnvelopeSpec) { s.TenantID = strings.Repeat("t", 65) }),
	}
}

func mustEnv(t *testing.T, spec core.EnvelopeSpec) core.Envelope {
	t.Helper()
	env, err := core.NewEnvelope(spec)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func writerCases(t *testing.T, tg testdb.Target, w *core.Writer, txm *txctx.Manager,
	writeAll func(context.Context, ...core.Envelope) error, existingID string) []badCase {
	env := mustEnv(t, validSpec())
	bulk, _ := chaosEnvs(t, 10000, nil)
	withZero := append(bulk[:9999:9999], core.Envelope{})
	dupSpec := validSpec()
	dupSpec.ID = existingID
	withDup := append(bulk[:9999:9999], mustEnv(t, dupSpec))
	withInner := append(bulk[:9999:9999], bulk[0])
	return []badCase{
		{name: "write: Write without a transaction in the context", is: core.ErrNoTransaction, run: func(ctx context.Context) error {
			_, err := w.Write(ctx, env)
			return err
		}},
		{name: "write: WriteTx on the pool (*sql.DB)", is: core.ErrNoTransaction, run: func(ctx context.Context) error {
			_, err := w.WriteTx(ctx, tg.DB, env)
			return err
		}},
		{name: "write: WriteTx on a *sql.Conn", is: core.ErrNoTransaction, run: func(ctx context.Context) error {
			conn, err := tg.DB.Conn(ctx)
			if err != nil {
				return err
			}
			defer conn.Close()
			_, err = w.WriteTx(ctx, conn, env)
			return err
		}},
		{name: "write: WriteTx with a nil transaction", is: core.ErrNoTransaction, run: func(ctx context.Context) error {
			_, err := w.WriteTx(ctx, nil, env)
			return err
		}},
		{name: "write: Write with a transaction that has ended", is: sql.ErrTxDone, run: func(ctx context.Context) error {
			var kept context.Context
			if err := txm.Do(ctx, func(ctx context.Context) error { kept = ctx; return nil }); err != nil {
				return err
			}
			_, err := w.Write(kept, env)
			return err
		}},
		{name: "write: the zero Envelope", is: core.ErrInvalid, field: "event id", run: func(ctx context.Context) error {
			return writeAll(ctx, core.Envelope{})
		}},
		{name: "write: an event id that is already in the table", is: core.ErrDuplicateEvent, run: func(ctx context.Context) error {
			return writeAll(ctx, mustEnv(t, dupSpec))
		}},
		{name: "write: one event id twice in one WriteAll", is: core.ErrDuplicateEvent, run: func(ctx context.Context) error {
			return writeAll(ctx, env, env)
		}},
		{name: "write: 10,000 events, the last one invalid", is: core.ErrInvalid, field: "event id", run: func(ctx context.Context) error {
			return writeAll(ctx, withZero...)
		}},
		{name: "write: 10,000 events, the last one repeats the first", is: core.ErrDuplicateEvent, run: func(ctx context.Context) error {
			return writeAll(ctx, withInner...)
		}},
		{name: "write: 10,000 events, the last one already in the table", is: core.ErrDuplicateEvent, run: func(ctx context.Context) error {
			return writeAll(ctx, withDup...)
		}},
	}
}

func tableNameCases(tg testdb.Target) []badCase {
	names := []string{
		`outbox"x`, "outbox`x", "outbox'x", `outbox\x`,
		"outbox; DROP TABLE " + tg.Table, "outbox;", tg.Table + "; --",
		"outbox -- comment", "outbox--", "outbox/*c*/", "/*c*/outbox", "outbox#c",
		"outbox x", " outbox", "outbox\n", "outbox\x00", "9outbox", "outbox-x", "évent", "outbox\xff",
		strings.Repeat("t", 64), "a.b.c", ".outbox", "outbox.", `"s".outbox`, "s.outbox;",
	}
	if tg.Name == "sqlite" {
		names = append(names, "main.outbox") // SQLite tables are not schema-qualified here
	}
	var cases []badCase
	for _, name := range names {
		cases = append(cases, badCase{name: fmt.Sprintf("table name %q", name), is: core.ErrInvalid, field: "table name",
			run: func(context.Context) error {
				st, err := tg.NewStore(name)
				if err == nil {
					return fmt.Errorf("store on %q accepted (table %q)", name, st.Table())
				}
				return err
			}})
	}
	return cases
}

func registryCases() []badCase {
	noop := func(context.Context, core.Event) error { return nil }
	return []badCase{
		{name: "registry: second listener for one (aggregate, event)", is: core.ErrDuplicateListener, run: func(context.Context) error {
			reg := core.NewRegistry()
			if err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, noop); err != nil {
				return err
			}
			return reg.RegisterFunc(chaos.Aggregate, chaos.EventType, noop)
		}},
		{name: "registry: duplicate through the Global default", is: core.ErrDuplicateListener, run: func(context.Context) error {
			reg := core.NewRegistry()
			if err := reg.RegisterFunc(nil, chaos.EventType, noop); err != nil {
				return err
			}
			return reg.RegisterFunc(core.Global, chaos.EventType, noop)
		}},
		{name: "registry: empty event type", is: core.ErrInvalid, field: "event type", run: func(context.Context) error {
			return core.NewRegistry().RegisterFunc(chaos.Aggregate, core.EventName(""), noop)
		}},
		{name: "registry: nil listener", is: core.ErrInvalid, field: "listener", run: func(context.Context) error {
			return core.NewRegistry().Register(chaos.Aggregate, chaos.EventType, nil)
		}},
	}
}

// acceptedCases checks the inputs the library takes on purpose.
func acceptedCases(t *testing.T, tg testdb.Target, writeAll func(context.Context, ...core.Envelope) error) {
	t.Helper()
	ctx := context.Background()
	get := func(id string) core.Event {
		t.Helper()
		ev, err := tg.Store.Get(ctx, tg.DB, id)
		if err != nil {
			t.Fatalf("get %q: %v", id, err)
		}
		return ev
	}

	// Exactly at every limit, with awkward bytes: stored and read back exactly.
	payload := make([]byte, core.MaxPayloadBytes)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	edge := mustEnv(t, core.EnvelopeSpec{
		ID: strings.Repeat("€", 12), Type: core.EventName(strings.Repeat("t", core.MaxEventTypeLen)),
		AggregateType: core.AggregateName(strings.Repeat("a", core.MaxAggregateTypeLen)),
		AggregateID:   strings.Repeat("ü", core.MaxAggregateIDLen/2), TenantID: "tenant\x01\t",
		Headers: map[string]string{"nul": "a\x00b", "ctl": "\x1b[0m<&>", "k": strings.Repeat("v", core.MaxHeaderBytes-20)},
		Bytes:   payload,
	})
	if err := writeAll(ctx, edge); err != nil {
		t.Fatalf("an envelope exactly at every limit: %v", err)
	}
	got := get(edge.ID())
	if !bytes.Equal(got.Payload(), payload) || !maps.Equal(got.Headers(), edge.Headers()) ||
		got.AggregateID() != edge.AggregateID() || got.TenantID() != edge.TenantID() || got.Type() != edge.Type() {
		t.Errorf("an envelope exactly at every limit did not read back byte-exact")
	}
	t.Logf("%-58s -> stored and read back byte-exact", "accepted: 1 MiB payload, 64 KiB headers, 36-byte id")

	// 10,000 events in one WriteAll: one transaction, several statements
	// (130,000 bind parameters would exceed PostgreSQL's 65,535 in one).
	bulk, ids := chaosEnvs(t, 10000, nil)
	if err := writeAll(ctx, bulk...); err != nil {
		t.Fatalf("10,000-event WriteAll: %v", err)
	}
	var n int
	q := "SELECT COUNT(*) FROM " + tg.Table + " WHERE event_id >= ? AND event_id <= ?"
	if tg.Name == "postgres" {
		q = "SELECT COUNT(*) FROM " + tg.Table + " WHERE event_id >= $1 AND event_id <= $2"
	}
	if err := tg.DB.QueryRowContext(ctx, q, ids[0], ids[len(ids)-1]).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 10000 {
		t.Errorf("10,000-event WriteAll stored %d rows", n)
	}
	t.Logf("%-58s -> %d rows in one transaction", "accepted: 10,000-event WriteAll", n)
}

// TestFailedWriteAllChangesNothing: a WriteAll that fails on its last event
// (an id already in the table) returns the error, and the caller, deciding
// the failure is not fatal to its business transaction, commits. None of
// the 9,999 other events may have been written: a failed WriteAll changes
// nothing, whichever statement of it failed; in position delivery, where
// the events are STREAM rows, too.
func TestFailedWriteAllChangesNothing(t *testing.T) {
	t.Parallel()
	forEachDialectDelivery(t, testdb.Dialects, func(t *testing.T, tg testdb.Target, dv delivery) {
		ctx := context.Background()
		w := deliveryWriter(t, dv, tg)
		existing := mustEnv(t, validSpec())
		tx, err := tg.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteTx(ctx, tx, existing); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		before := tableSnapshot(t, tg.DB, tg.Table)

		bulk, _ := chaosEnvs(t, 10000, nil)
		bulk[len(bulk)-1] = existing
		tx, err = tg.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, werr := w.WriteAllTx(ctx, tx, bulk)
		cerr := tx.Commit()
		after := testnode.StatusCounts(t, tg.DB, tg.Table)
		t.Logf("%s: WriteAll error %v; commit afterwards: %v; rows now %v", tg.Name, werr, cerr, after)
		if !errors.Is(werr, core.ErrDuplicateEvent) {
			t.Fatalf("WriteAll error %v, want ErrDuplicateEvent", werr)
		}
		if tableSnapshot(t, tg.DB, tg.Table) != before {
			t.Errorf("the failed WriteAll left %d rows behind once the caller committed", after[core.StatusNew]-1)
		}

		// A batch that mixes the claim path (a delayed event) and, in
		// position delivery, STREAM rows, failing on its last event.
		delayed := validSpec()
		delayed.NotBefore = time.Now().Add(time.Hour)
		tx, err = tg.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, werr = w.WriteAllTx(ctx, tx, []core.Envelope{mustEnv(t, delayed), existing})
		cerr = tx.Commit()
		if !errors.Is(werr, core.ErrDuplicateEvent) {
			t.Fatalf("mixed WriteAll error %v, want ErrDuplicateEvent", werr)
		}
		if tableSnapshot(t, tg.DB, tg.Table) != before {
			t.Errorf("the failed mixed WriteAll left rows behind once the caller committed (commit: %v): %v",
				cerr, testnode.StatusCounts(t, tg.DB, tg.Table))
		}
	})
}

// TestEventIDsDifferingInTrailingSpaces: "x" and "x " are two different
// event ids (NewEnvelope accepts both); writing both must keep two events,
// in either delivery.
func TestEventIDsDifferingInTrailingSpaces(t *testing.T) {
	t.Parallel()
	forEachDialectDelivery(t, testdb.Dialects, func(t *testing.T, tg testdb.Target, dv delivery) {
		ctx := context.Background()
		w := deliveryWriter(t, dv, tg)
		txm, err := txctx.New(tg.DB, txctx.Config{})
		if err != nil {
			t.Fatal(err)
		}
		base := "sp-" + testdb.UniqueName("id")
		var errs []error
		for _, id := range []string{base, base + " ", base + "  "} {
			spec := validSpec()
			spec.ID = id
			env := mustEnv(t, spec)
			errs = append(errs, txm.Do(ctx, func(ctx context.Context) error {
				_, err := w.Write(ctx, env)
				return err
			}))
		}
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("writing ids %q, %q and %q: %v", base, base+" ", base+"  ", err)
		}
		for _, id := range []string{base, base + " ", base + "  "} {
			ev, err := tg.Store.Get(ctx, tg.DB, id)
			if err != nil || ev.ID() != id {
				t.Errorf("Get(%q) = %q, %v", id, ev.ID(), err)
			}
		}
	})
}

// TestTimestampOutOfRange: not every database stores every year (MySQL's
// DATETIME holds 1000 to 9999), so NewEnvelope refuses times outside that
// range. And a row whose timestamp cannot be read back (written by something
// else) fails alone: the claim delivers the rows around it and the poller
// marks it DEAD, instead of failing the whole claim with every row leased.
func TestTimestampOutOfRange(t *testing.T) {
	t.Parallel()
	for _, ts := range []time.Time{
		time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(999, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		spec := validSpec()
		spec.OccurredAt = ts
		if _, err := core.NewEnvelope(spec); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("occurred at %v: NewEnvelope = %v, want core.ErrInvalid", ts, err)
		}
		spec = validSpec()
		spec.NotBefore = ts
		if _, err := core.NewEnvelope(spec); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("not before %v: NewEnvelope = %v, want core.ErrInvalid", ts, err)
		}
	}
	// Only SQLite stores timestamps as text a foreign writer can corrupt.
	forEachDialect(t, []string{"sqlite"}, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		log := testnode.NewDeliveryLog()
		reg := core.NewRegistry()
		if err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(_ context.Context, ev core.Event) error {
			log.Record(ev.ID())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		envs, ids := chaosEnvs(t, 6, nil)
		testnode.WriteForPoller(t, tg.Store, tg.DB, envs...)
		bad := ids[0]
		if _, err := tg.DB.ExecContext(ctx, "UPDATE "+tg.Table+" SET created_at = '-0005-01-01T00:00:00.000000Z' WHERE event_id = ?", bad); err != nil {
			t.Fatal(err)
		}
		d, err := dispatch.New(dispatch.Config{Store: tg.Store, DB: tg.DB, Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close(context.Background()) })
		p, err := poller.New(poller.Config{Store: tg.Store, DB: tg.DB, Handler: d})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.PollOnce(ctx); err != nil {
			t.Fatalf("poll with one unreadable row: %v", err)
		}
		log.WaitFor(t, 15*time.Second, "the readable events", testnode.AllDelivered(ids[1:]))
		var status int
		if err := tg.DB.QueryRowContext(ctx, "SELECT status FROM "+tg.Table+" WHERE event_id = ?", bad).Scan(&status); err != nil {
			t.Fatal(err)
		}
		if core.Status(status) != core.StatusDead {
			t.Fatalf("unreadable row status = %v, want DEAD", core.Status(status))
		}
	})
}

// writeOne commits env in a plain transaction on the target's pool.
func writeOne(tg testdb.Target, env core.Envelope) error {
	w, err := core.NewWriter(core.WriterConfig{Store: tg.Store})
	if err != nil {
		return err
	}
	tx, err := tg.DB.BeginTx(context.Background(), nil)
	if err != nil {
		return err
	}
	if _, err := w.WriteTx(context.Background(), tx, env); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
