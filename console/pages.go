package console

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/outboxlog"
)

// page is what every template gets: the layout's fields and the page's own.
type page struct {
	Title       string
	Page        string // the nav entry to highlight
	AllowWrites bool
	CSRF        string // the token of the forms; empty on pages without any
	Notice      string
	Data        any
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Title = c.cfg.Title
	p.AllowWrites = c.cfg.AllowWrites
	var b bytes.Buffer
	if err := templates.ExecuteTemplate(&b, name, p); err != nil {
		// A template that fails on its data is a bug of this package; the
		// operator still gets a page saying so.
		c.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "console: render page",
			outboxlog.Err(err), slog.String("template", name))
		http.Error(w, "console: render page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fail renders an error page. 5xx errors are logged: they are the
// database's, not the operator's.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if status >= 500 {
		c.cfg.Logger.LogAttrs(r.Context(), slog.LevelError, "console: "+msg, slog.String("path", r.URL.Path))
	}
	c.render(w, r, status, "error", page{Data: errorData{Status: status, StatusText: http.StatusText(status), Message: msg}})
}

type errorData struct {
	Status     int
	StatusText string
	Message    string
}

// badRequest is an error in a request parameter: a 400 naming it.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badParam(name, format string, args ...any) error {
	return &badRequest{msg: "parameter " + name + ": " + fmt.Sprintf(format, args...)}
}

// failErr renders err as a 400 when it is the request's fault, else a 500.
func (c *Console) failErr(w http.ResponseWriter, r *http.Request, err error) {
	var br *badRequest
	if errors.As(err, &br) || errors.Is(err, core.ErrInvalid) {
		c.fail(w, r, http.StatusBadRequest, err.Error())
		return
	}
	c.fail(w, r, http.StatusInternalServerError, err.Error())
}

// --- overview ---

type overviewData struct {
	Now          time.Time
	Stats        core.Stats
	OldestAge    string // "" when nothing is pending
	Types        []core.TypeCount
	BlockedKeys  []core.BlockedKey // nil unless the store orders some aggregate types
	PurgeDefault string
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	st, err := c.insp.Stats(ctx, c.cfg.DB)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	types, err := c.insp.CountByType(ctx, c.cfg.DB)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	blocked, err := c.dead.BlockedKeys(ctx, core.DeadFilter{Limit: c.cfg.PageSize})
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	now := c.cfg.Now()
	d := overviewData{Now: now, Stats: st, Types: types, BlockedKeys: blocked, PurgeDefault: formatDuration(c.cfg.PurgeRetention)}
	if !st.OldestPending.IsZero() {
		d.OldestAge = formatDuration(max(now.Sub(st.OldestPending), 0))
	}
	c.render(w, r, http.StatusOK, "overview", page{Page: "overview", Data: d})
}

// --- dead events ---

type deadData struct {
	EventType, AggregateType string
	Limit                    int
	Count                    int64
	Events                   []core.Event
	// Query is the filter as a query string, for links that keep it.
	Query template.URL
	// DecodeError: some rows could not be decoded; the others are shown.
	DecodeError string
	// Marks says which ordered events are DEAD heads of blocked keys.
	Marks deadMarks
}

// filter reads the type, aggregate and limit parameters.
func (c *Console) filter(q url.Values) (core.DeadFilter, error) {
	f := core.DeadFilter{Limit: c.cfg.PageSize}
	var err error
	if f.EventType, err = textParam(q, "type", core.MaxEventTypeLen); err != nil {
		return f, err
	}
	if f.AggregateType, err = textParam(q, "aggregate", core.MaxAggregateTypeLen); err != nil {
		return f, err
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > MaxPageSize {
			return f, badParam("limit", "%q is not a whole number from 1 to %d", s, MaxPageSize)
		}
		f.Limit = n
	}
	return f, nil
}

// textParam returns the parameter name of q, checked as the column that
// stores it would be: at most max bytes of printable UTF-8.
func textParam(q url.Values, name string, max int) (string, error) {
	vs := q[name]
	if len(vs) > 1 {
		return "", badParam(name, "given %d times", len(vs))
	}
	if len(vs) == 0 {
		return "", nil
	}
	s := strings.TrimSpace(vs[0])
	if len(s) > max {
		return "", badParam(name, "is %d bytes long, more than %d", len(s), max)
	}
	if !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl) {
		return "", badParam(name, "contains control characters or invalid UTF-8")
	}
	return s, nil
}

func filterQuery(f core.DeadFilter) url.Values {
	q := url.Values{}
	if f.EventType != "" {
		q.Set("type", f.EventType)
	}
	if f.AggregateType != "" {
		q.Set("aggregate", f.AggregateType)
	}
	return q
}

func (c *Console) deadList(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := c.filter(q)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	ctx := r.Context()
	n, err := c.dead.Count(ctx, f)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	// The heads among the first f.Limit DEAD events are among the first
	// f.Limit heads: both lists are oldest first.
	heads, err := c.heads(ctx, f, f.Limit)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	events, err := c.dead.List(ctx, f)
	d := deadData{EventType: f.EventType, AggregateType: f.AggregateType, Limit: f.Limit, Count: n,
		Events: events, Query: template.URL(filterQuery(f).Encode()),
		Marks: deadMarks{Heads: heads, Ordered: len(c.ordering()) > 0}}
	if err != nil {
		if len(events) == 0 {
			c.failErr(w, r, err)
			return
		}
		d.DecodeError = err.Error()
	}
	c.render(w, r, http.StatusOK, "dead", page{Page: "dead", CSRF: c.csrfToken(w, r), Notice: notice(q), Data: d})
}

// notice is the line a redirect after a replay asks the list to show. It
// comes from the URL, so it is only ever a fixed sentence around an id or a
// number.
func notice(q url.Values) string {
	switch {
	case q.Get("replayed") != "":
		return fmt.Sprintf("Replayed %s: it is NEW again and will be delivered.", q.Get("replayed"))
	case q.Get("not-replayed") != "":
		return fmt.Sprintf("%s was not replayed: it does not exist or is no longer DEAD.", q.Get("not-replayed"))
	case q.Get("replayed-all") != "":
		n, err := strconv.ParseInt(q.Get("replayed-all"), 10, 64)
		if err != nil {
			return ""
		}
		s := fmt.Sprintf("Replayed %d events: they are NEW again and will be delivered.", n)
		if left, err := strconv.ParseInt(q.Get("left-out"), 10, 64); err == nil && left > 0 {
			s += fmt.Sprintf(" Left out %d ordered events their keys have moved past.", left)
		}
		return s
	case q.Get("skipped") != "":
		return fmt.Sprintf("Skipped %s: its key moved past it, and the key's next event is delivered; %s stays DEAD.",
			q.Get("skipped"), q.Get("skipped"))
	case q.Get("not-skipped") != "":
		return fmt.Sprintf("%s was not skipped: it is not the DEAD head of a blocked key (any more).", q.Get("not-skipped"))
	}
	return ""
}

// --- one event ---

type eventData struct {
	Event        core.Event
	Key          *core.BlockedKey // the blocked key Event is the DEAD head of, or nil
	MovedPast    bool             // Event is an ordered DEAD event its key has moved past
	Headers      []header
	ShowPayloads bool
	Payload      string
	PayloadKind  string // "JSON", "base64" or "text"
}

type header struct{ Key, Value string }

// eventOf loads the event the request's id parameter names; on a bad id, an
// unknown event or a failed read it answers the request itself and returns
// false.
func (c *Console) eventOf(w http.ResponseWriter, r *http.Request) (core.Event, bool) {
	id, err := idParam(r.URL.Query())
	if err != nil {
		c.failErr(w, r, err)
		return core.Event{}, false
	}
	ev, err := c.cfg.Store.Get(r.Context(), c.cfg.DB, id)
	if errors.Is(err, core.ErrNotFound) {
		c.fail(w, r, http.StatusNotFound, "no event with id "+strconv.Quote(id))
		return core.Event{}, false
	}
	if err != nil {
		c.failErr(w, r, err)
		return core.Event{}, false
	}
	return ev, true
}

func (c *Console) event(w http.ResponseWriter, r *http.Request) {
	ev, ok := c.eventOf(w, r)
	if !ok {
		return
	}
	d := eventData{Event: ev, ShowPayloads: c.cfg.ShowPayloads}
	var err error
	if d.Key, err = c.blockedKeyOf(r.Context(), ev); err != nil {
		c.failErr(w, r, err)
		return
	}
	d.MovedPast = d.Key == nil && ev.Status == core.StatusDead && ev.Seq != 0 && len(c.ordering()) > 0
	hs := ev.RawHeaders()
	for _, k := range slices.Sorted(maps.Keys(hs)) {
		d.Headers = append(d.Headers, header{k, hs[k]})
	}
	if c.cfg.ShowPayloads {
		d.Payload, d.PayloadKind = showPayload(ev.RawPayload())
	}
	c.render(w, r, http.StatusOK, "event", page{Page: "dead", CSRF: c.csrfToken(w, r), Data: d})
}

// showPayload returns p as indented JSON when it is JSON, as text when it is
// printable UTF-8, and as base64 otherwise.
func showPayload(p []byte) (text, kind string) {
	var b bytes.Buffer
	if json.Valid(p) && json.Indent(&b, p, "", "  ") == nil {
		return b.String(), "JSON"
	}
	if utf8.Valid(p) && !bytes.ContainsFunc(p, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) {
		return string(p), "text"
	}
	return base64.StdEncoding.EncodeToString(p), "base64"
}

func idParam(q url.Values) (string, error) {
	id, err := textParam(q, "id", core.MaxEventIDLen)
	if err == nil && id == "" {
		err = badParam("id", "is missing")
	}
	return id, err
}

// --- replays ---

func (c *Console) replay(w http.ResponseWriter, r *http.Request) {
	id, err := idParam(r.PostForm)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	f, err := c.filter(r.PostForm) // the list to go back to
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	ok, err := c.dead.Replay(r.Context(), id)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	q := filterQuery(f)
	if ok {
		q.Set("replayed", id)
	} else {
		q.Set("not-replayed", id)
	}
	seeOther(w, "dead?"+q.Encode())
}

// seeOther redirects to a page of the console after a POST. The location
// stays relative: http.Redirect would resolve it against the path the
// console sees, without the prefix it is mounted under.
func seeOther(w http.ResponseWriter, location string) {
	w.Header().Set("Location", location)
	w.WriteHeader(http.StatusSeeOther)
}

type replayAllData struct {
	EventType, AggregateType string
	Count                    int64 // DEAD events matching the filter
	Query                    template.URL
	// Plan, on a store with ordered delivery, says which of them are
	// replayed; nil: all of them.
	Plan *replayPlan
	// Confirmed is how many the form replays.
	Confirmed int64
}

// replayAllConfirm shows how many events "replay all" would replay, and the
// form that does it.
func (c *Console) replayAllConfirm(w http.ResponseWriter, r *http.Request) {
	f, err := c.filter(r.URL.Query())
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	n, err := c.dead.Count(r.Context(), f)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	d := replayAllData{EventType: f.EventType, AggregateType: f.AggregateType, Count: n, Query: template.URL(filterQuery(f).Encode()),
		Confirmed: n}
	if ordering := c.ordering(); len(ordering) > 0 {
		p, err := c.plan(r.Context(), f, ordering)
		if err != nil {
			c.failErr(w, r, err)
			return
		}
		d.Plan, d.Confirmed = &p, p.Replayable()
	}
	c.render(w, r, http.StatusOK, "replay-all", page{Page: "dead", CSRF: c.csrfToken(w, r), Data: d})
}

// replayAll replays the DEAD events matching the filter, at most as many as
// the confirmation page showed: events that died since then were not
// confirmed.
func (c *Console) replayAll(w http.ResponseWriter, r *http.Request) {
	f, err := c.filter(r.PostForm)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	s := r.PostForm.Get("confirmed")
	confirmed, err := strconv.Atoi(s)
	if err != nil || confirmed < 0 {
		c.failErr(w, r, badParam("confirmed", "%q is not the number of events the confirmation page showed", s))
		return
	}
	var n, leftOut int64
	if ordering := c.ordering(); confirmed > 0 && len(ordering) > 0 {
		// Ordered events the keys have moved past are left out.
		p, err := c.plan(r.Context(), f, ordering)
		if err == nil {
			leftOut = p.LeftOut
			n, err = c.replayPlanned(r.Context(), p, int64(confirmed))
		}
		if err != nil {
			c.failErr(w, r, fmt.Errorf("%w (%d replayed before the error)", err, n))
			return
		}
	} else if confirmed > 0 {
		f.Limit = confirmed
		n, err = c.dead.ReplayAll(r.Context(), f, nil)
		if err != nil {
			c.failErr(w, r, fmt.Errorf("%w (%d replayed before the error)", err, n))
			return
		}
	}
	q := filterQuery(f)
	q.Set("replayed-all", strconv.FormatInt(n, 10))
	if leftOut > 0 {
		q.Set("left-out", strconv.FormatInt(leftOut, 10))
	}
	seeOther(w, "dead?"+q.Encode())
}

// --- purge dry run ---

type purgeData struct {
	OlderThan, DeadOlderThan string
	KeepDead                 bool
	DoneBefore, DeadBefore   time.Time
	Done, Dead               int64
}

// purge counts what a purge with the given retention would delete; it
// deletes nothing.
func (c *Console) purge(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	older, err := durationParam(q, "older-than", c.cfg.PurgeRetention)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	deadOlder, err := durationParam(q, "dead-older-than", older)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	now := c.cfg.Now()
	d := purgeData{OlderThan: formatDuration(older), DeadOlderThan: formatDuration(deadOlder),
		KeepDead: q.Get("keep-dead") != "", DoneBefore: now.Add(-older).UTC()}
	p := core.PurgeParams{DoneBefore: d.DoneBefore}
	if !d.KeepDead {
		d.DeadBefore = now.Add(-deadOlder).UTC()
		p.DeadBefore = d.DeadBefore
	}
	d.Done, d.Dead, err = c.insp.CountPurgeable(r.Context(), c.cfg.DB, p)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "purge", page{Page: "purge", Data: d})
}

func durationParam(q url.Values, name string, def time.Duration) (time.Duration, error) {
	s := strings.TrimSpace(q.Get(name))
	if s == "" {
		return def, nil
	}
	d, err := parseDuration(s)
	if err != nil || d <= 0 {
		return 0, badParam(name, "%q is not a positive duration: want e.g. 7d, 36h, 90m or 1d12h", s)
	}
	return d, nil
}

// parseDuration is time.ParseDuration with a leading whole number of days
// ("7d", "1d12h"), the unit retention is thought in.
func parseDuration(s string) (time.Duration, error) {
	var days int64
	if i := strings.IndexByte(s, 'd'); i >= 0 {
		n, err := strconv.ParseInt(s[:i], 10, 32)
		if err != nil || n < 0 {
			return 0, errors.New("bad days")
		}
		days, s = n, s[i+1:]
		if s == "" {
			s = "0s"
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, errors.New("bad duration")
	}
	return time.Duration(days)*24*time.Hour + d, nil
}

// formatDuration writes d the way parseDuration reads it, to the second:
// "7d", "1d2h3m4s", "45s".
func formatDuration(d time.Duration) string {
	d = d.Round(time.Second)
	if d < time.Second {
		return "0s"
	}
	days := d / (24 * time.Hour)
	rest := d - days*24*time.Hour
	s := ""
	if days > 0 {
		s = strconv.FormatInt(int64(days), 10) + "d"
	}
	if rest > 0 {
		r := rest.String() // e.g. "2h3m4s", "3m0s", "1h0m0s"
		r = strings.Replace(r, "m0s", "m", 1)
		r = strings.Replace(r, "h0m", "h", 1)
		s += r
	}
	return s
}
