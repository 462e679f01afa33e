package sqlstore

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// FuzzDecodeRow feeds arbitrary column values to the row decoder every
// claim, get and dead query goes through. It must never panic; what it
// accepts must be a valid event carrying exactly the stored values; and the
// headers it decodes must encode back (encodeHeaders, as Insert writes them)
// to the same map.
func FuzzDecodeRow(f *testing.F) {
	f.Add("01J0", "T", "A", "agg", true, "tenant", true, []byte(`{}`), `{"k":"v"}`, true, int16(0), 0)
	f.Add("", "", "", "", false, "", false, []byte(nil), ``, false, int16(9), -1)
	f.Add("id", "T", "A", "", false, "", false, []byte{0xff}, `{"":"v"}`, true, int16(3), 10)
	f.Add("id", "T", "A", "", false, "", false, []byte{}, `{"k":1}`, true, int16(1), 0)
	f.Add("id", "T", "A", "", false, "", false, []byte{}, `null`, true, int16(2), 1)
	f.Add("id", "T", "A", "", false, "", false, []byte{}, `{"k":"\ud800"}`, true, int16(2), 1)
	f.Fuzz(func(t *testing.T, id, typ, agg, aggID string, aggValid bool, tenant string, tenantValid bool,
		payload []byte, headers string, headersValid bool, status int16, attempts int) {
		created := time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)
		// A NULL scans as an invalid NullString with an empty String.
		if !aggValid {
			aggID = ""
		}
		if !tenantValid {
			tenant = ""
		}
		if !headersValid {
			headers = ""
		}
		r := row{
			id: id, eventType: typ, aggregateType: agg,
			aggregateID: sql.NullString{String: aggID, Valid: aggValid},
			tenantID:    sql.NullString{String: tenant, Valid: tenantValid},
			headers:     sql.NullString{String: headers, Valid: headersValid},
			payload:     payload, status: status, attempts: attempts,
			availableAt: nullTime{Time: created, Valid: true}, createdAt: nullTime{Time: created, Valid: true},
		}
		ev, err := r.decode()
		if err != nil {
			return
		}
		if err := ev.Validate(); err != nil {
			t.Fatalf("decoded event fails Validate: %v", err)
		}
		if ev.Status < core.StatusNew || ev.Status > core.StatusDead || int16(ev.Status) != status {
			t.Fatalf("status %d decoded as %v", status, ev.Status)
		}
		if ev.ID() != id || ev.Type() != typ || ev.AggregateType() != agg || ev.AggregateID() != aggID ||
			ev.TenantID() != tenant || !bytes.Equal(ev.Payload(), payload) || ev.Attempts != attempts ||
			!ev.CreatedAt.Equal(created) || !ev.OccurredAt().Equal(created) {
			t.Fatalf("decoded event does not carry the stored values: %#v", ev)
		}
		var want map[string]string
		if headersValid && headers != "" {
			if err := json.Unmarshal([]byte(headers), &want); err != nil {
				t.Fatalf("headers %q decoded although not JSON: %v", headers, err)
			}
		}
		if !maps.Equal(ev.Headers(), want) {
			t.Fatalf("headers %q decoded as %q, want %q", headers, ev.Headers(), want)
		}
		enc, err := encodeHeaders(ev.Headers())
		if err != nil {
			t.Fatalf("decoded headers do not encode: %v", err)
		}
		again := r
		again.headers = sql.NullString{}
		if s, ok := enc.(string); ok {
			again.headers = sql.NullString{String: s, Valid: true}
		}
		ev2, err := again.decode()
		if err != nil || !maps.Equal(ev2.Headers(), ev.Headers()) {
			t.Fatalf("headers %q did not survive encode and decode: %q, %v", ev.Headers(), ev2.Headers(), err)
		}
	})
}

// FuzzScanTime feeds arbitrary text to the timestamp scanner (SQLite and
// MySQL without parseTime hand timestamps over as text) and checks that the
// SQLite encoding of any time the stores write reads back exactly.
func FuzzScanTime(f *testing.F) {
	f.Add("2024-01-02T03:04:05.000006Z", int64(0))
	f.Add("2024-01-02 03:04:05.123456", int64(1700000000000000))
	f.Add("2024-01-02 03:04:05+02:00", int64(-62135596800000000))
	f.Add("garbage", int64(253402300799999999))
	f.Add("2024-02-29T23:59:59.999999Z", int64(0))
	f.Add("2023-02-29T00:00:00.000000Z", int64(0))
	f.Add("2023-13-01T00:00:00.000000Z", int64(0))
	f.Add("2023-01-01T24:00:00.000000Z", int64(0))
	f.Add("2023-01-01T00:00:00.00000+Z", int64(0))
	f.Fuzz(func(t *testing.T, text string, micros int64) {
		var a, b nullTime
		if err := errors.Join(a.Scan(text), b.Scan([]byte(text))); err != nil {
			t.Fatalf("scan of %q failed instead of recording the error: %v", text, err)
		}
		if (a.Err == nil) != (b.Err == nil) || a.Time != b.Time || a.Valid != b.Valid {
			t.Fatalf("string and []byte scans of %q differ: %+v / %+v", text, a, b)
		}
		// What the fast path reads, time.Parse reads the same way; what it
		// leaves, the layouts of parse read.
		ft, fast := parseFixedTime(text)
		pt, perr := time.Parse(SQLiteTimeFormat, text)
		if fast && (perr != nil || !ft.Equal(pt)) || !fast && perr == nil && !a.Time.Equal(pt) {
			t.Fatalf("%q: fixed-width parse %v (%v), time.Parse %v (%v)", text, ft, fast, pt, perr)
		}
		if a.Err == nil && (!a.Valid || a.Time.Location() != time.UTC) {
			t.Fatalf("%q scanned as %v (valid %v), want a valid UTC time", text, a.Time, a.Valid)
		}

		ts := time.UnixMicro(micros).UTC()
		if y := ts.Year(); y < 1 || y > 9999 {
			return // outside what every dialect stores; see reliability.TestTimestampOutOfRange
		}
		var n nullTime
		enc := ts.Format(SQLiteTimeFormat)
		if err := errors.Join(n.Scan(enc), n.Err); err != nil || !n.Time.Equal(ts) {
			t.Fatalf("%v encoded as %q read back as %v, %v", ts, enc, n.Time, err)
		}
	})
}

// FuzzDecodeHeaders holds decodeHeaders, whose common case skips
// encoding/json, to json.Unmarshal: the same map, or an error from both.
func FuzzDecodeHeaders(f *testing.F) {
	for _, s := range []string{`{}`, `{"k":"v"}`, `{"a":"1","b":"2"}`, `{"a":"}"}`, `{"a":"b}`, `{"a":"b",}`,
		`{"a":"b""c":"d"}`, `{"a":"b","a":"c"}`, ` {"a":"b"}`, `{"a" :"b"}`, `{"a":"\u00e9"}`, `{"a":"` + "\xff" + `"}`,
		`{"a":"` + "\x01" + `"}`, `null`, `{"k":1}`, `{"":""}`, `{"a":"b"`, `{`, `}`, `{"é":"ü/<>&"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := decodeHeaders(s)
		var want map[string]string
		werr := json.Unmarshal([]byte(s), &want)
		if (err != nil) != (werr != nil) {
			t.Fatalf("decodeHeaders(%q) error %v; json.Unmarshal's %v", s, err, werr)
		}
		if err == nil && (!maps.Equal(got, want) || (got == nil) != (want == nil)) {
			t.Fatalf("decodeHeaders(%q) = %#v; json.Unmarshal gives %#v", s, got, want)
		}
	})
}
