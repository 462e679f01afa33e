package sqlstore

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
)

// columns lists the outbox columns in the order scanEvent reads them.
const columns = "event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, " +
	"status, attempts, available_at, created_at, done_at, last_error, locked_by, locked_at, seq"

// nullTime scans a timestamp whatever the driver hands over: time.Time
// (pgx, MySQL with parseTime), or text (SQLite, MySQL without parseTime).
type nullTime struct {
	Time  time.Time
	Valid bool
	// Err is a value that is not a timestamp. Scan keeps it here instead of
	// failing, so that one bad row fails alone (see row.decode) rather than
	// the whole claim.
	Err error
}

var textTimeLayouts = []string{
	SQLiteTimeFormat,
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999-07:00",
}

func (n *nullTime) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*n = nullTime{}
		return nil
	case time.Time:
		*n = nullTime{Time: v.UTC(), Valid: true}
		return nil
	case []byte:
		return n.parse(string(v))
	case string:
		return n.parse(v)
	}
	*n = nullTime{Err: fmt.Errorf("timestamp of unexpected type %T", v)}
	return nil
}

func (n *nullTime) parse(s string) error {
	if t, ok := parseFixedTime(s); ok {
		*n = nullTime{Time: t, Valid: true}
		return nil
	}
	for _, layout := range textTimeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			*n = nullTime{Time: t.UTC(), Valid: true}
			return nil
		}
	}
	*n = nullTime{Err: fmt.Errorf("unrecognised timestamp %q", s)}
	return nil
}

// parseFixedTime parses s in SQLiteTimeFormat (2006-01-02T15:04:05.000000Z,
// how SQLite stores every timestamp) without time.Parse, which costs ten
// times as much; a claim reads three timestamps per row. It reports false
// for anything else, which parse then tries with its layouts.
func parseFixedTime(s string) (time.Time, bool) {
	if len(s) != len(SQLiteTimeFormat) || s[4] != '-' || s[7] != '-' || s[10] != 'T' ||
		s[13] != ':' || s[16] != ':' || s[19] != '.' || s[26] != 'Z' {
		return time.Time{}, false
	}
	num := func(i, j int) (int, bool) {
		v := 0
		for ; i < j; i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			v = v*10 + int(c-'0')
		}
		return v, true
	}
	year, ok1 := num(0, 4)
	month, ok2 := num(5, 7)
	day, ok3 := num(8, 10)
	hour, ok4 := num(11, 13)
	minute, ok5 := num(14, 16)
	sec, ok6 := num(17, 19)
	micro, ok7 := num(20, 26)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 ||
		month < 1 || month > 12 || day < 1 || day > daysIn(time.Month(month), year) || hour > 23 || minute > 59 || sec > 59 {
		return time.Time{}, false // time.Parse decides, and names the problem
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, micro*1000, time.UTC), true
}

func daysIn(m time.Month, year int) int {
	return time.Date(year, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// row holds one scanned row before it is decoded into a core.Event.
type row struct {
	id, eventType, aggregateType   string
	aggregateID, tenantID, headers sql.NullString
	payload                        []byte
	status                         int16
	attempts                       int
	availableAt, createdAt, doneAt nullTime
	lastError, lockedBy            sql.NullString
	lockedAt                       nullTime
	seq                            sql.NullInt64
}

func (r *row) dest() []any {
	return []any{&r.id, &r.eventType, &r.aggregateType, &r.aggregateID, &r.tenantID, &r.payload,
		&r.headers, &r.status, &r.attempts, &r.availableAt, &r.createdAt, &r.doneAt,
		&r.lastError, &r.lockedBy, &r.lockedAt, &r.seq}
}

// streamDest are the destinations of a STREAM row's columns in a position
// read (readCols but pos); streamRow fills in the rest.
func (r *row) streamDest() []any {
	return []any{&r.id, &r.eventType, &r.aggregateType, &r.aggregateID, &r.tenantID, &r.payload,
		&r.headers, &r.createdAt}
}

// streamRow decodes a STREAM row read by position (streamDest) at pos. The
// columns a position read leaves out hold the same in every STREAM row: it
// is written with no attempt, lease, outcome or sequence, and due when it
// occurred (a delayed event is never STREAM); leaving STREAM is the only
// change it ever sees.
func (r *row) streamRow(pos int64) position.Row {
	r.status = int16(core.StatusStream)
	r.attempts = 0
	r.availableAt = r.createdAt
	ev, err := r.decode()
	if err != nil {
		return position.Row{Pos: pos, ID: r.id, Err: err}
	}
	return position.Row{Pos: pos, ID: r.id, Event: ev}
}

func (r *row) decode() (core.Event, error) {
	for _, t := range []struct {
		name string
		v    nullTime
	}{{"available_at", r.availableAt}, {"created_at", r.createdAt}, {"done_at", r.doneAt}, {"locked_at", r.lockedAt}} {
		if t.v.Err != nil {
			return core.Event{}, fmt.Errorf("%s: %w", t.name, t.v.Err)
		}
	}
	var headers map[string]string
	if r.headers.Valid && r.headers.String != "" {
		var err error
		if headers, err = decodeHeaders(r.headers.String); err != nil {
			return core.Event{}, fmt.Errorf("headers: %w", err)
		}
	}
	env, err := core.RestoreEnvelope(core.EnvelopeFields{
		ID:            r.id,
		Type:          r.eventType,
		AggregateType: r.aggregateType,
		AggregateID:   r.aggregateID.String,
		TenantID:      r.tenantID.String,
		OccurredAt:    r.createdAt.Time,
		Headers:       headers,
		Payload:       r.payload,
	})
	if err != nil {
		return core.Event{}, err
	}
	status := core.Status(r.status)
	if status < core.StatusNew || status > core.StatusStream {
		return core.Event{}, fmt.Errorf("status %d is not a known status", r.status)
	}
	return core.Event{
		Envelope:    env,
		Status:      status,
		Attempts:    r.attempts,
		AvailableAt: r.availableAt.Time,
		CreatedAt:   r.createdAt.Time,
		DoneAt:      r.doneAt.Time,
		LastError:   r.lastError.String,
		LockedBy:    r.lockedBy.String,
		LockedAt:    r.lockedAt.Time,
		Seq:         r.seq.Int64,
	}, nil
}

// scanEvents reads rows into events; rows that fail to decode go to bad.
func scanEvents(rows *sql.Rows) (events []core.Event, bad []core.RowError, err error) {
	return scanEventsN(rows, 0)
}

// scanEventsN is scanEvents for about n rows (a claim's limit): the events
// are allocated once instead of grown (a core.Event is a few hundred bytes).
func scanEventsN(rows *sql.Rows, n int) (events []core.Event, bad []core.RowError, err error) {
	defer rows.Close()
	if n > 0 {
		events = make([]core.Event, 0, n)
	}
	// One row and one list of destinations for all rows: decode copies
	// what it keeps, and Scan replaces every field.
	var r row
	dest := r.dest()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, nil, fmt.Errorf("scan event: %w", err)
		}
		ev, err := r.decode()
		if err != nil {
			bad = append(bad, core.RowError{ID: r.id, Err: err})
			continue
		}
		events = append(events, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read events: %w", err)
	}
	return events, bad, nil
}

// encodeHeaders returns the headers column value: a JSON object, or NULL.
func encodeHeaders(h map[string]string) (any, error) {
	if len(h) == 0 {
		return nil, nil
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("encode headers: %w", err)
	}
	return string(b), nil
}

// decodeHeaders decodes the headers column: a JSON object of strings, as
// encodeHeaders writes it. The object encodeHeaders writes for ordinary
// headers (no escapes, no white space, valid UTF-8) is split without
// encoding/json, its keys and values slices of s; anything else, and every
// error, goes to json.Unmarshal, so that both read the same from every s.
func decodeHeaders(s string) (map[string]string, error) {
	if h, ok := splitHeaders(s); ok {
		return h, nil
	}
	var h map[string]string
	err := json.Unmarshal([]byte(s), &h)
	return h, err
}

// splitHeaders reads s as {"k":"v",...} with plain strings (no backslash,
// no control character, valid UTF-8); false when s is anything else.
func splitHeaders(s string) (map[string]string, bool) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' || strings.IndexByte(s, '\\') >= 0 {
		return nil, false
	}
	h := make(map[string]string, strings.Count(s, `":"`))
	body := s[1 : len(s)-1]
	for body != "" {
		k, rest, ok := plainString(body)
		if !ok || rest == "" || rest[0] != ':' {
			return nil, false
		}
		v, rest, ok := plainString(rest[1:])
		if !ok {
			return nil, false
		}
		h[k] = v
		switch {
		case rest == "":
			body = ""
		case rest[0] == ',' && len(rest) > 1:
			body = rest[1:]
		default:
			return nil, false
		}
	}
	return h, true
}

// plainString reads the JSON string that s starts with when it has no
// escape or control character and is valid UTF-8, and returns it and what
// follows it.
func plainString(s string) (str, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		return "", "", false
	}
	end := strings.IndexByte(s[1:], '"')
	if end < 0 {
		return "", "", false
	}
	str = s[1 : 1+end]
	for i := 0; i < len(str); i++ {
		if str[i] < 0x20 {
			return "", "", false
		}
	}
	if !utf8.ValidString(str) {
		return "", "", false
	}
	return str, s[2+end:], true
}

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
