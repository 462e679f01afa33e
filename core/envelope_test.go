package core_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

type orderEvent string

func (e orderEvent) Name() string { return string(e) }

const orderPlaced orderEvent = "OrderPlaced"

func TestNewEnvelopeDefaults(t *testing.T) {
	before := time.Now().UTC().Truncate(time.Microsecond)
	env, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if len(env.ID()) != 26 {
		t.Errorf("ID %q is not a ULID", env.ID())
	}
	if env.Type() != "OrderPlaced" || env.AggregateType() != core.GlobalAggregateName {
		t.Errorf("type %q aggregate %q", env.Type(), env.AggregateType())
	}
	if env.OccurredAt().Before(before) || env.OccurredAt().Location() != time.UTC {
		t.Errorf("OccurredAt %v", env.OccurredAt())
	}
	if !env.AvailableAt().Equal(env.OccurredAt()) || !env.NotBefore().IsZero() {
		t.Errorf("AvailableAt %v NotBefore %v", env.AvailableAt(), env.NotBefore())
	}
}

func TestEventIDsIncrease(t *testing.T) {
	prev := core.NewEventID()
	for range 10000 {
		id := core.NewEventID()
		if id <= prev {
			t.Fatalf("%s after %s", id, prev)
		}
		prev = id
	}
}

func TestEnvelopeIsImmutable(t *testing.T) {
	payload := []byte(`{"a":1}`)
	headers := map[string]string{"k": "v"}
	env, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, JSON: payload, Headers: headers})
	if err != nil {
		t.Fatal(err)
	}
	payload[2] = 'X'
	headers["k"] = "changed"
	got := env.Payload()
	got[0] = 'Y'
	env.Headers()["k"] = "changed again"
	if !bytes.Equal(env.Payload(), []byte(`{"a":1}`)) {
		t.Errorf("payload changed: %s", env.Payload())
	}
	if v, _ := env.Header("k"); v != "v" {
		t.Errorf("header changed: %q", v)
	}
}

func TestNewEnvelopeRejectsBadInput(t *testing.T) {
	ok := core.EnvelopeSpec{Type: orderPlaced, JSON: []byte(`{}`)}
	cases := []struct {
		name  string
		mod   func(*core.EnvelopeSpec)
		field string
	}{
		{"no type", func(s *core.EnvelopeSpec) { s.Type = nil }, "event type"},
		{"empty type", func(s *core.EnvelopeSpec) { s.Type = core.EventName("") }, "event type"},
		{"long type", func(s *core.EnvelopeSpec) { s.Type = core.EventName(strings.Repeat("t", 129)) }, "event type"},
		{"no payload", func(s *core.EnvelopeSpec) { s.JSON = nil }, "payload"},
		{"both payloads", func(s *core.EnvelopeSpec) { s.Bytes = []byte("x") }, "payload"},
		{"invalid json", func(s *core.EnvelopeSpec) { s.JSON = []byte(`{"a":`) }, "payload"},
		{"json over 1 MiB", func(s *core.EnvelopeSpec) { s.JSON = bytes.Repeat([]byte(" "), core.MaxPayloadBytes+1) }, "payload"},
		{"bytes over 1 MiB", func(s *core.EnvelopeSpec) { s.JSON, s.Bytes = nil, make([]byte, core.MaxPayloadBytes+1) }, "payload"},
		{"empty header key", func(s *core.EnvelopeSpec) { s.Headers = map[string]string{"": "v"} }, "headers"},
		{"invalid utf8 header", func(s *core.EnvelopeSpec) { s.Headers = map[string]string{"k": "\xff"} }, "headers"},
		{"oversized headers", func(s *core.EnvelopeSpec) {
			s.Headers = map[string]string{"k": strings.Repeat("v", core.MaxHeaderBytes)}
		}, "headers"},
		{"long id", func(s *core.EnvelopeSpec) { s.ID = strings.Repeat("i", 37) }, "event id"},
		{"invalid utf8 id", func(s *core.EnvelopeSpec) { s.ID = "id\xff" }, "event id"},
		{"nul in id", func(s *core.EnvelopeSpec) { s.ID = "id\x00" }, "event id"},
		{"long aggregate type", func(s *core.EnvelopeSpec) { s.AggregateType = core.AggregateName(strings.Repeat("a", 65)) }, "aggregate type"},
		{"long aggregate id", func(s *core.EnvelopeSpec) { s.AggregateID = strings.Repeat("a", 129) }, "aggregate id"},
		{"long tenant", func(s *core.EnvelopeSpec) { s.TenantID = strings.Repeat("a", 65) }, "tenant id"},
		{"whitespace type", func(s *core.EnvelopeSpec) { s.Type = core.EventName("   ") }, "event type"},
		{"tab and newline type", func(s *core.EnvelopeSpec) { s.Type = core.EventName("\t\n") }, "event type"},
		{"whitespace aggregate type", func(s *core.EnvelopeSpec) { s.AggregateType = core.AggregateName("   ") }, "aggregate type"},
		{"whitespace id", func(s *core.EnvelopeSpec) { s.ID = "   " }, "event id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec := ok
			tc.mod(&spec)
			_, err := core.NewEnvelope(spec)
			var ve *core.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, core.ErrInvalid) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			if ve.Field != tc.field {
				t.Errorf("field = %q, want %q (%v)", ve.Field, tc.field, err)
			}
		})
	}
	if _, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, Bytes: make([]byte, core.MaxPayloadBytes)}); err != nil {
		t.Errorf("exactly 1 MiB rejected: %v", err)
	}
}

func TestZeroEnvelopeIsInvalid(t *testing.T) {
	if err := (core.Envelope{}).Validate(); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("zero envelope: %v", err)
	}
}

func TestTruncateError(t *testing.T) {
	if got := core.TruncateError("short"); got != "short" {
		t.Errorf("short: %q", got)
	}
	long := strings.Repeat("ü", core.MaxLastErrorLen)
	got := core.TruncateError(long)
	if len(got) > core.MaxLastErrorLen || !strings.HasSuffix(got, "ü") {
		t.Errorf("long: %d bytes", len(got))
	}
	if got := core.TruncateError("a\x00b\xffc"); got != "a\uFFFDb\uFFFDc" {
		t.Errorf("sanitised: %q", got)
	}
}

func FuzzNewEnvelope(f *testing.F) {
	f.Add("OrderPlaced", "Order", "1", "t", "k", "v", []byte(`{"a":1}`), true)
	f.Add("", "", "", "", "", "", []byte{}, false)
	f.Fuzz(func(t *testing.T, typ, agg, aggID, tenant, hk, hv string, payload []byte, isJSON bool) {
		spec := core.EnvelopeSpec{Type: core.EventName(typ), AggregateType: core.AggregateName(agg),
			AggregateID: aggID, TenantID: tenant, Headers: map[string]string{hk: hv}}
		if isJSON {
			spec.JSON = payload
		} else {
			spec.Bytes = payload
		}
		env, err := core.NewEnvelope(spec)
		if err != nil {
			if !errors.Is(err, core.ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		if err := env.Validate(); err != nil {
			t.Fatalf("accepted envelope fails Validate: %v", err)
		}
		if env.Type() != typ || !bytes.Equal(env.Payload(), payload) {
			t.Fatalf("fields not preserved")
		}
	})
}
