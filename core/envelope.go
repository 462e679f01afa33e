package core

import (
	"encoding/json"
	"maps"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
)

// Limits enforced by NewEnvelope. They match the column sizes of the outbox
// table, so that a valid envelope always fits.
const (
	MaxPayloadBytes      = 1 << 20 // 1 MiB
	MaxHeaderBytes       = 64 << 10
	MaxEventIDLen        = 36
	MaxEventTypeLen      = 128
	MaxAggregateTypeLen  = 64
	MaxAggregateIDLen    = 128
	MaxTenantIDLen       = 64
	MaxLastErrorLen      = 4000
	maxHeaderKeyOrValLen = MaxHeaderBytes
)

// EnvelopeSpec describes an event to write. Type and exactly one of JSON or
// Bytes are required; everything else has a default.
type EnvelopeSpec struct {
	// ID is the event id and idempotency key. Default: a new monotonic ULID,
	// which no other event can have, so that a pgxtx transaction sends the
	// event's INSERT with its COMMIT (see pgxtx.Config.HoldWrites). Set it
	// when the id comes from elsewhere (a request's idempotency key): Write
	// then returns ErrDuplicateEvent for an id already written.
	ID string
	// Type is the event type. Required.
	Type EventType
	// AggregateType defaults to Global.
	AggregateType AggregateType
	// AggregateID identifies the entity the event is about. Optional.
	AggregateID string
	// TenantID is carried through to listeners untouched. Optional.
	TenantID string
	// OccurredAt defaults to the current time. It is stored as created_at and
	// orders delivery.
	OccurredAt time.Time
	// NotBefore delays delivery until this time. Zero means deliver at once.
	NotBefore time.Time
	// Headers are string metadata; keys must be non-empty.
	Headers map[string]string
	// JSON is a JSON payload; it must be valid JSON. Set JSON or Bytes, not both.
	JSON []byte
	// Bytes is an opaque binary payload. Set JSON or Bytes, not both.
	Bytes []byte
}

// Envelope is a validated, immutable event. Build one with NewEnvelope; its
// accessors return copies, so nothing outside can change it.
type Envelope struct {
	id            string
	eventType     string
	aggregateType string
	aggregateID   string
	tenantID      string
	occurredAt    time.Time
	notBefore     time.Time
	headers       map[string]string
	payload       []byte
	seq           int64 // set by the Writer after the insert; see Seq
	// generatedID: NewEnvelope generated the id, so that no other event
	// can have it (see package writectx for who asks).
	generatedID bool
}

// NewEnvelope validates spec and returns the envelope it describes. On bad
// input it returns a *ValidationError (matching ErrInvalid) naming the field.
func NewEnvelope(spec EnvelopeSpec) (Envelope, error) {
	var typeName, aggName string
	if spec.Type != nil {
		typeName = spec.Type.Name()
	}
	if spec.AggregateType != nil {
		aggName = spec.AggregateType.Name()
	}
	if aggName == "" {
		aggName = GlobalAggregateName
	}
	id, generated := spec.ID, false
	if id == "" {
		id, generated = NewEventID(), true
	}
	occurred := spec.OccurredAt
	if occurred.IsZero() {
		occurred = time.Now()
	}
	var payload []byte
	switch {
	case spec.JSON != nil && spec.Bytes != nil:
		return Envelope{}, Invalid("payload", "both JSON and Bytes are set; set exactly one")
	case spec.JSON != nil:
		if len(spec.JSON) > MaxPayloadBytes {
			return Envelope{}, Invalid("payload", "%d bytes exceeds the limit of %d", len(spec.JSON), MaxPayloadBytes)
		}
		if !json.Valid(spec.JSON) {
			return Envelope{}, Invalid("payload", "JSON payload is not valid JSON")
		}
		payload = spec.JSON
	case spec.Bytes != nil:
		payload = spec.Bytes
	default:
		return Envelope{}, Invalid("payload", "neither JSON nor Bytes is set; set exactly one")
	}
	env := Envelope{
		id:            id,
		eventType:     typeName,
		aggregateType: aggName,
		aggregateID:   spec.AggregateID,
		tenantID:      spec.TenantID,
		occurredAt:    occurred.UTC().Truncate(time.Microsecond),
		notBefore:     spec.NotBefore.UTC().Truncate(time.Microsecond),
		headers:       maps.Clone(spec.Headers),
		payload:       slices.Clone(payload),
		generatedID:   generated,
	}
	if spec.NotBefore.IsZero() {
		env.notBefore = time.Time{}
	}
	if err := env.Validate(); err != nil {
		return Envelope{}, err
	}
	return env, nil
}

// Validate checks every field against the limits of the outbox table. Envelopes
// built by NewEnvelope are valid; stores call it again on decoded rows.
func (e Envelope) Validate() error {
	if err := checkText("event id", e.id, MaxEventIDLen, true); err != nil {
		return err
	}
	if err := checkText("event type", e.eventType, MaxEventTypeLen, true); err != nil {
		return err
	}
	if err := checkText("aggregate type", e.aggregateType, MaxAggregateTypeLen, true); err != nil {
		return err
	}
	if err := checkText("aggregate id", e.aggregateID, MaxAggregateIDLen, false); err != nil {
		return err
	}
	if err := checkText("tenant id", e.tenantID, MaxTenantIDLen, false); err != nil {
		return err
	}
	if err := checkTime("occurred at", e.occurredAt); err != nil {
		return err
	}
	if !e.notBefore.IsZero() {
		if err := checkTime("not before", e.notBefore); err != nil {
			return err
		}
	}
	if e.payload == nil {
		return Invalid("payload", "is missing")
	}
	if len(e.payload) > MaxPayloadBytes {
		return Invalid("payload", "%d bytes exceeds the limit of %d", len(e.payload), MaxPayloadBytes)
	}
	size := 0
	for k, v := range e.headers {
		if k == "" {
			return Invalid("headers", "empty header key")
		}
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return Invalid("headers", "header %q is not valid UTF-8", k)
		}
		size += len(k) + len(v)
	}
	if size > MaxHeaderBytes {
		return Invalid("headers", "%d bytes exceeds the limit of %d", size, MaxHeaderBytes)
	}
	return nil
}

func checkText(field, s string, maxLen int, required bool) error {
	if s == "" {
		if required {
			return Invalid(field, "is empty")
		}
		return nil
	}
	blank, valid, nul := scanText(s)
	switch {
	case required && blank:
		// A name of only spaces reads as empty in every log line and query
		// result, and a listener registered for it is one nobody can name.
		return Invalid(field, "is only whitespace")
	case len(s) > maxLen:
		return Invalid(field, "%d bytes exceeds the limit of %d", len(s), maxLen)
	case !valid:
		return Invalid(field, "is not valid UTF-8")
	case nul:
		return Invalid(field, "contains a NUL byte")
	}
	return nil
}

// scanText reads s once and reports whether it is only white space (as
// strings.TrimSpace sees it), valid UTF-8, and whether it holds a NUL byte.
// Every event's names pass through it on each write and each read, so the
// ASCII bytes take no decoding.
func scanText(s string) (blank, valid, nul bool) {
	blank, valid = true, true
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			nul = nul || c == 0
			blank = blank && asciiSpace[c]
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			valid, blank = false, false
		} else {
			blank = blank && unicode.IsSpace(r)
		}
		i += size
	}
	return blank, valid, nul
}

// asciiSpace are the ASCII bytes strings.TrimSpace removes.
var asciiSpace = [utf8.RuneSelf]bool{'\t': true, '\n': true, '\v': true, '\f': true, '\r': true, ' ': true}

// Timestamps must fall within the range every supported database stores
// (MySQL's DATETIME is the narrowest).
var (
	minTime = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

func checkTime(field string, t time.Time) error {
	if t.Before(minTime) || t.After(maxTime) {
		return Invalid(field, "%s is outside the years 1000 to 9999", t.Format(time.RFC3339Nano))
	}
	return nil
}

// NewEventID returns a new ULID string. IDs from one process are strictly
// increasing, so they also break ordering ties in creation order.
func NewEventID() string { return ulid.Make().String() }

// ID returns the event id, the idempotency key consumers deduplicate on.
func (e Envelope) ID() string { return e.id }

// Type returns the event type name.
func (e Envelope) Type() string { return e.eventType }

// AggregateType returns the aggregate type name (GlobalAggregateName by default).
func (e Envelope) AggregateType() string { return e.aggregateType }

// AggregateID returns the aggregate id, or "".
func (e Envelope) AggregateID() string { return e.aggregateID }

// TenantID returns the tenant id, or "".
func (e Envelope) TenantID() string { return e.tenantID }

// OccurredAt returns when the event happened (UTC, microsecond precision).
func (e Envelope) OccurredAt() time.Time { return e.occurredAt }

// NotBefore returns the earliest delivery time, or the zero time.
func (e Envelope) NotBefore() time.Time { return e.notBefore }

// AvailableAt returns when the event becomes deliverable: NotBefore if set,
// else OccurredAt.
func (e Envelope) AvailableAt() time.Time {
	if !e.notBefore.IsZero() {
		return e.notBefore
	}
	return e.occurredAt
}

// Headers returns a copy of the headers (nil when there are none).
func (e Envelope) Headers() map[string]string { return maps.Clone(e.headers) }

// Header returns one header value and whether it is present.
func (e Envelope) Header(key string) (string, bool) {
	v, ok := e.headers[key]
	return v, ok
}

// Payload returns a copy of the payload bytes.
func (e Envelope) Payload() []byte { return slices.Clone(e.payload) }

// PayloadLen returns the payload size in bytes without copying it.
func (e Envelope) PayloadLen() int { return len(e.payload) }

// EnvelopeFields is the raw material of an envelope, as read from a store.
// Stores use RestoreEnvelope to rebuild the envelope of a stored row.
type EnvelopeFields struct {
	ID, Type, AggregateType, AggregateID, TenantID string
	OccurredAt, NotBefore                          time.Time
	Headers                                        map[string]string
	Payload                                        []byte
}

// RestoreEnvelope rebuilds an envelope from stored fields, taking ownership of
// the maps and slices in f. It validates like NewEnvelope but applies no
// defaults: a row that fails returns a *ValidationError.
func RestoreEnvelope(f EnvelopeFields) (Envelope, error) {
	env := Envelope{
		id:            f.ID,
		eventType:     f.Type,
		aggregateType: f.AggregateType,
		aggregateID:   f.AggregateID,
		tenantID:      f.TenantID,
		occurredAt:    f.OccurredAt.UTC(),
		notBefore:     f.NotBefore.UTC(),
		headers:       f.Headers,
		payload:       f.Payload,
	}
	if f.NotBefore.IsZero() {
		env.notBefore = time.Time{}
	}
	if env.payload == nil {
		env.payload = []byte{}
	}
	return env, env.Validate()
}

// RawHeaders returns the headers without copying. The caller must not modify
// them; stores use it to encode headers without a copy per insert.
func (e Envelope) RawHeaders() map[string]string { return e.headers }

// RawPayload returns the payload without copying. The caller must not modify
// it; stores use it to avoid a copy per insert.
func (e Envelope) RawPayload() []byte { return e.payload }

// withHeaders returns envs with extra added to the headers of each, without
// replacing a header an envelope already has. It copies what it changes:
// envs and its envelopes stay as they were.
func withHeaders(envs []Envelope, extra map[string]string) []Envelope {
	if len(extra) == 0 {
		return envs
	}
	out := slices.Clone(envs)
	for i := range out {
		h := maps.Clone(out[i].headers)
		if h == nil {
			h = make(map[string]string, len(extra))
		}
		for k, v := range extra {
			if _, ok := h[k]; !ok {
				h[k] = v
			}
		}
		out[i].headers = h
	}
	return out
}

// Seq returns the envelope's position in its key (see Ordering) as the
// Writer's store assigned it: the envelopes a WriterHook's AfterWrite and
// AfterCommit receive carry it. It is 0 for unordered envelopes and before
// the write.
func (e Envelope) Seq() int64 { return e.seq }
