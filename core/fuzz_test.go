package core_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox/core"
)

// headersValid is the header rule of DESIGN.md, stated independently of
// core: keys non-empty, keys and values valid UTF-8, at most MaxHeaderBytes
// of keys and values together.
func headersValid(h map[string]string) bool {
	size := 0
	for k, v := range h {
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return false
		}
		size += len(k) + len(v)
	}
	return size <= core.MaxHeaderBytes
}

// FuzzEnvelopeHeaders checks header validation against the rule above, the
// JSON encoding the stores write headers in (an accepted header map comes
// back identical), and that an envelope is immune to changes of the map it
// was built from and of the maps it hands out.
func FuzzEnvelopeHeaders(f *testing.F) {
	f.Add("trace", "00-abc-01", "", "", 0)
	f.Add("", "v", "k", "v", 0)
	f.Add("k\xff", "v", "a", "b", 0)
	f.Add("k", "a\x00b\u2028<&>\"\\", "x", "\xed\xa0\x80", 0)
	f.Add("big", "v", "k", "v", core.MaxHeaderBytes-6)
	f.Add("big", "v", "k", "v", core.MaxHeaderBytes-5)
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, pad int) {
		h := map[string]string{k1: v1, k2: v2}
		if pad > 0 && pad <= 2*core.MaxHeaderBytes {
			h[k1] = v1 + string(bytes.Repeat([]byte{'p'}, pad))
		}
		want := headersValid(h)
		spec := core.EnvelopeSpec{Type: core.EventName("T"), Bytes: []byte{}, Headers: h}
		env, err := core.NewEnvelope(spec)
		if err != nil {
			var ve *core.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, core.ErrInvalid) || ve.Field != "headers" {
				t.Fatalf("headers %q: error %v is not a headers ValidationError", h, err)
			}
			if want {
				t.Fatalf("valid headers %q rejected: %v", h, err)
			}
			return
		}
		if !want {
			t.Fatalf("invalid headers %q accepted", h)
		}
		if err := env.Validate(); err != nil {
			t.Fatalf("accepted envelope fails Validate: %v", err)
		}
		got := env.Headers()
		if !maps.Equal(got, h) {
			t.Fatalf("headers %q came out as %q", h, got)
		}

		// The stores write headers as a JSON object and read them back.
		enc, err := json.Marshal(got)
		if err != nil {
			t.Fatalf("encode %q: %v", got, err)
		}
		var dec map[string]string
		if err := json.Unmarshal(enc, &dec); err != nil || !maps.Equal(dec, got) {
			t.Fatalf("headers %q did not survive JSON: %q, %v", got, dec, err)
		}

		// Immutability.
		for k := range h {
			h[k] = "changed"
		}
		h["added"] = "x"
		got["added"] = "y"
		if !maps.Equal(env.Headers(), dec) {
			t.Fatalf("envelope headers changed with the maps outside it: %q", env.Headers())
		}
	})
}

// FuzzRestoreEnvelope checks that write-time and read-time validation
// agree: whatever NewEnvelope accepts, RestoreEnvelope (what a store does
// with a row) accepts with the same fields, and the other way round, so a
// written event never becomes an undecodable row and a row a store decodes
// could have been written.
func FuzzRestoreEnvelope(f *testing.F) {
	f.Add("01J0000000000000000000000", "OrderPlaced", "Order", "o-1", "t", "k", "v", []byte(`{}`), int64(0))
	f.Add("id\x00", "T", "A", "", "", "", "", []byte{}, int64(-1))
	f.Add("€€€€€€€€€€€€", "T", "A", "\xff", "", "k", "v", []byte{0}, int64(1<<62))
	f.Add("01J0000000000000000000000", "   ", "Order", "", "", "", "", []byte(`{}`), int64(0))
	f.Add("01J0000000000000000000000", "T", " \t\n", "", "", "", "", []byte(`{}`), int64(0))
	f.Fuzz(func(t *testing.T, id, typ, agg, aggID, tenant, hk, hv string, payload []byte, nanos int64) {
		if id == "" || agg == "" {
			return // NewEnvelope would fill in defaults RestoreEnvelope does not apply
		}
		occurred := time.Unix(0, nanos).UTC().Truncate(time.Microsecond)
		var headers map[string]string
		if hk != "" || hv != "" {
			headers = map[string]string{hk: hv}
		}
		payload = append([]byte{}, payload...) // Bytes: set, possibly empty
		env, nerr := core.NewEnvelope(core.EnvelopeSpec{
			ID: id, Type: core.EventName(typ), AggregateType: core.AggregateName(agg),
			AggregateID: aggID, TenantID: tenant, OccurredAt: occurred, Headers: headers, Bytes: payload,
		})
		row, rerr := core.RestoreEnvelope(core.EnvelopeFields{
			ID: id, Type: typ, AggregateType: agg, AggregateID: aggID, TenantID: tenant,
			OccurredAt: occurred, Headers: maps.Clone(headers), Payload: append([]byte{}, payload...),
		})
		if (nerr == nil) != (rerr == nil) {
			t.Fatalf("NewEnvelope: %v; RestoreEnvelope: %v", nerr, rerr)
		}
		if nerr != nil {
			if !errors.Is(nerr, core.ErrInvalid) || !errors.Is(rerr, core.ErrInvalid) {
				t.Fatalf("errors %v / %v do not match ErrInvalid", nerr, rerr)
			}
			return
		}
		if env.ID() != row.ID() || env.Type() != row.Type() || env.AggregateType() != row.AggregateType() ||
			env.AggregateID() != row.AggregateID() || env.TenantID() != row.TenantID() ||
			!env.OccurredAt().Equal(row.OccurredAt()) || !bytes.Equal(env.Payload(), row.Payload()) ||
			len(env.Headers()) != len(row.Headers()) || !maps.Equal(env.Headers(), row.Headers()) {
			t.Fatalf("written and restored envelopes differ:\n%#v\n%#v", env, row)
		}
	})
}
