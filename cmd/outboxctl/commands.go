package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dead"
)

// textTime is the time format of text output: UTC, microseconds, sortable.
const textTime = "2006-01-02T15:04:05.000000Z"

func (a *app) stats(ctx context.Context, args []string) error {
	fs := a.command("stats")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("stats: unexpected argument %q", fs.Arg(0))
	}
	ctx, s, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := readStats(ctx, s, a.now())
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(a.stdout, st)
	}
	oldest, age := "-", "-"
	if st.OldestPending != nil {
		oldest = st.OldestPending.Format(textTime)
		age = (time.Duration(*st.OldestAge * float64(time.Second))).Round(time.Millisecond).String()
	}
	w := a.stdout
	fmt.Fprintf(w, "table               %s\n", st.Table)
	fmt.Fprintf(w, "pending             %d\n", st.Pending)
	fmt.Fprintf(w, "retrying            %d\n", st.Retrying)
	fmt.Fprintf(w, "leased              %d\n", st.Leased)
	fmt.Fprintf(w, "dead                %d\n", st.Dead)
	fmt.Fprintf(w, "done                %d\n", st.Done)
	fmt.Fprintf(w, "waiting             %d\n", st.Waiting)
	fmt.Fprintf(w, "blocked_keys        %d\n", st.BlockedKeys)
	fmt.Fprintf(w, "oldest_pending      %s\n", oldest)
	fmt.Fprintf(w, "oldest_pending_age  %s\n", age)
	if st.Stream > 0 || st.PositionLag > 0 {
		streamAge := "-"
		if st.OldestStreamAge != nil {
			streamAge = (time.Duration(*st.OldestStreamAge * float64(time.Second))).Round(time.Millisecond).String()
		}
		fmt.Fprintf(w, "stream              %d\n", st.Stream)
		fmt.Fprintf(w, "position_lag        %d\n", st.PositionLag)
		fmt.Fprintf(w, "oldest_stream_age   %s\n", streamAge)
	}
	return nil
}

// filterFlags adds --type and --aggregate.
func filterFlags(fs *flags) (eventType, aggregate *string) {
	eventType = fs.String("type", "", "only events of this event `type`")
	aggregate = fs.String("aggregate", "", "only events of this aggregate `type`")
	return eventType, aggregate
}

func (a *app) manager(s *session, batch int) (*dead.Manager, error) {
	return dead.New(dead.Config{DB: s.db, Store: s.store, BatchSize: batch, Now: a.now})
}

// connectManager connects (see connect) and returns a dead-event manager on
// the session, which the caller closes.
func (a *app) connectManager(ctx context.Context, batch int) (context.Context, *session, *dead.Manager, error) {
	ctx, s, err := a.connect(ctx)
	if err != nil {
		return ctx, nil, nil, err
	}
	m, err := a.manager(s, batch)
	if err != nil {
		s.Close()
		return ctx, nil, nil, err
	}
	return ctx, s, m, nil
}

// listFilter is the filter of the dead commands that list: --type,
// --aggregate and --limit.
type listFilter struct {
	eventType, aggregate *string
	limit                *int
}

// newListFilter registers the filter's flags on fs; what names the listed
// things in --limit's help.
func newListFilter(fs *flags, what string) listFilter {
	eventType, aggregate := filterFlags(fs)
	return listFilter{eventType, aggregate, fs.Int("limit", 100, "list at most `N` "+what)}
}

// filter returns the parsed filter, or a usage error when cmd was given
// arguments or a limit that is not positive.
func (l listFilter) filter(cmd string, fs *flags) (core.DeadFilter, error) {
	if fs.NArg() > 0 {
		return core.DeadFilter{}, usagef("%s: unexpected argument %q", cmd, fs.Arg(0))
	}
	if *l.limit <= 0 {
		return core.DeadFilter{}, usagef("%s: --limit must be positive", cmd)
	}
	return core.DeadFilter{EventType: *l.eventType, AggregateType: *l.aggregate, Limit: *l.limit}, nil
}

func (a *app) deadList(ctx context.Context, args []string) error {
	fs := a.command("dead list")
	lf := newListFilter(fs, "events")
	asJSON := fs.Bool("json", false, "print JSON (an array of events)")
	payload := fs.Bool("payload", false, "include payloads: as text when JSON, base64 otherwise")
	if err := fs.parse(args); err != nil {
		return err
	}
	f, err := lf.filter("dead list", fs)
	if err != nil {
		return err
	}
	ctx, s, m, err := a.connectManager(ctx, 0)
	if err != nil {
		return err
	}
	defer s.Close()
	events, err := m.List(ctx, f)
	if err != nil && len(events) == 0 {
		return err
	}
	// Rows that decoded are shown even if others did not; the error follows.
	if *asJSON {
		out := make([]eventJSON, len(events))
		for i, ev := range events {
			out[i] = toJSON(ev, *payload)
		}
		if jerr := writeJSON(a.stdout, out); jerr != nil {
			return jerr
		}
	} else {
		writeEvents(a.stdout, events, *payload)
	}
	return err
}

func (a *app) deadCount(ctx context.Context, args []string) error {
	fs := a.command("dead count")
	eventType, aggregate := filterFlags(fs)
	asJSON := fs.Bool("json", false, `print JSON: {"dead": N}`)
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("dead count: unexpected argument %q", fs.Arg(0))
	}
	ctx, s, m, err := a.connectManager(ctx, 0)
	if err != nil {
		return err
	}
	defer s.Close()
	n, err := m.Count(ctx, core.DeadFilter{EventType: *eventType, AggregateType: *aggregate})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(a.stdout, map[string]int64{"dead": n})
	}
	fmt.Fprintln(a.stdout, n)
	return nil
}

// confirmFlags adds --yes and --dry-run.
func confirmFlags(fs *flags) (yes, dryRun *bool) {
	yes = fs.Bool("yes", false, "apply the change (without it: print the plan, change nothing, exit 3)")
	dryRun = fs.Bool("dry-run", false, "print the plan and exit 0, changing nothing")
	return yes, dryRun
}

// confirmed decides, after the plan was printed, whether to go on.
func (a *app) confirmed(yes, dryRun bool) (bool, error) {
	switch {
	case dryRun:
		fmt.Fprintln(a.stderr, "outboxctl: dry run; nothing changed")
		return false, nil
	case !yes:
		fmt.Fprintln(a.stderr, "outboxctl: nothing changed; run again with --yes to apply (exit code 3)")
		return false, exitCode(exitConfirm)
	}
	return true, nil
}

func (a *app) deadReplay(ctx context.Context, args []string) error {
	fs := a.command("dead replay")
	yes, dryRun := confirmFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	ids := fs.Args()
	if len(ids) == 0 {
		return usagef("dead replay: give at least one event ID")
	}
	ctx, s, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer s.Close()

	// The plan: which of the IDs are DEAD now.
	var todo []string
	skipped := 0
	for _, id := range ids {
		ev, err := s.store.Get(ctx, s.db, id)
		switch {
		case errors.Is(err, core.ErrNotFound):
			fmt.Fprintf(a.stdout, "skip %s: not found\n", id)
			skipped++
		case err != nil:
			return fmt.Errorf("look up %s: %w", id, err)
		case ev.Status != core.StatusDead:
			fmt.Fprintf(a.stdout, "skip %s: status %s, not DEAD\n", id, ev.Status)
			skipped++
		default:
			fmt.Fprintf(a.stdout, "would replay %s  type=%s aggregate=%s attempts=%d last_error=%s\n",
				id, ev.Type(), ev.AggregateType(), ev.Attempts, oneLine(ev.LastError, 120))
			todo = append(todo, id)
		}
	}
	if len(todo) == 0 {
		fmt.Fprintln(a.stderr, "outboxctl: nothing to replay")
		return exitCode(exitNotFound)
	}
	if ok, err := a.confirmed(*yes, *dryRun); !ok {
		return err
	}
	m, err := a.manager(s, 0)
	if err != nil {
		return err
	}
	for _, id := range todo {
		ok, err := m.Replay(ctx, id)
		if err != nil {
			return err
		}
		if ok {
			fmt.Fprintf(a.stdout, "replayed %s\n", id)
		} else { // it changed since the plan
			fmt.Fprintf(a.stdout, "skipped %s: no longer DEAD\n", id)
			skipped++
		}
	}
	if skipped > 0 {
		return exitCode(exitNotFound)
	}
	return nil
}

func (a *app) deadReplayAll(ctx context.Context, args []string) error {
	fs := a.command("dead replay-all")
	eventType, aggregate := filterFlags(fs)
	limit := fs.Int("limit", 0, "replay at most `N` events, oldest first (default: all)")
	batch := fs.Int("batch", dead.DefaultBatchSize, "events per statement")
	yes, dryRun := confirmFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("dead replay-all: unexpected argument %q", fs.Arg(0))
	}
	if *limit < 0 || *batch <= 0 {
		return usagef("dead replay-all: --limit must not be negative and --batch must be positive")
	}
	ctx, s, m, err := a.connectManager(ctx, *batch)
	if err != nil {
		return err
	}
	defer s.Close()
	f := core.DeadFilter{EventType: *eventType, AggregateType: *aggregate}
	n, err := m.Count(ctx, f)
	if err != nil {
		return err
	}
	if *limit > 0 {
		n = min(n, int64(*limit))
	}
	fmt.Fprintf(a.stdout, "would replay %d DEAD events (type=%s aggregate=%s), oldest first\n",
		n, orAny(*eventType), orAny(*aggregate))
	if n == 0 {
		return nil
	}
	if ok, err := a.confirmed(*yes, *dryRun); !ok {
		return err
	}
	f.Limit = int(n)
	p := a.progress("replayed", n)
	done, err := m.ReplayAll(ctx, f, p.report)
	p.finish(done)
	fmt.Fprintf(a.stdout, "replayed %d DEAD events\n", done)
	return err
}

func (a *app) purge(ctx context.Context, args []string) error {
	fs := a.command("purge")
	var olderThan, deadOlderThan time.Duration
	fs.Var(durationFlag{&olderThan}, "older-than", "delete DONE rows that finished more than `D` ago, e.g. 7d or 36h (required)")
	fs.Var(durationFlag{&deadOlderThan}, "dead-older-than", "delete DEAD rows that died more than `D` ago (default: --older-than)")
	keepDead := fs.Bool("keep-dead", false, "delete no DEAD rows")
	batch := fs.Int("batch", 500, "rows per DELETE statement")
	yes, dryRun := confirmFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return usagef("purge: unexpected argument %q", fs.Arg(0))
	case olderThan <= 0:
		return usagef("purge: --older-than is required and must be positive, e.g. --older-than 7d")
	case deadOlderThan < 0:
		return usagef("purge: --dead-older-than must be positive")
	case *keepDead && deadOlderThan != 0:
		return usagef("purge: --keep-dead and --dead-older-than exclude each other")
	case *batch <= 0:
		return usagef("purge: --batch must be positive")
	}
	ctx, s, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	now := a.now().UTC()
	p := core.PurgeParams{DoneBefore: now.Add(-olderThan), Limit: *batch}
	if !*keepDead {
		p.DeadBefore = now.Add(-olderThan)
		if deadOlderThan > 0 {
			p.DeadBefore = now.Add(-deadOlderThan)
		}
	}
	doneN, deadN, err := s.store.CountPurgeable(ctx, s.db, p)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "would delete %d DONE events finished before %s\n", doneN, p.DoneBefore.Format(textTime))
	if p.DeadBefore.IsZero() {
		fmt.Fprintln(a.stdout, "keeping all DEAD events")
	} else {
		fmt.Fprintf(a.stdout, "would delete %d DEAD events that died before %s\n", deadN, p.DeadBefore.Format(textTime))
	}
	if doneN+deadN == 0 {
		return nil
	}
	if ok, err := a.confirmed(*yes, *dryRun); !ok {
		return err
	}
	prog := a.progress("deleted", doneN+deadN)
	var total int64
	for {
		n, err := s.store.Purge(ctx, s.db, p)
		total += n
		if err != nil {
			prog.finish(total)
			fmt.Fprintf(a.stdout, "deleted %d events\n", total)
			return err
		}
		if n > 0 {
			prog.report(total)
		}
		if n < int64(p.Limit) {
			break
		}
	}
	prog.finish(total)
	fmt.Fprintf(a.stdout, "deleted %d events\n", total)
	return nil
}

func (a *app) schema(args []string) error {
	fs := a.command("schema")
	if err := fs.parse(args); err != nil {
		return err
	}
	dialect, err := a.dialectArg("schema", fs)
	if err != nil {
		return err
	}
	st, err := newStore(dialect, a.g.table)
	if err != nil {
		return err
	}
	fmt.Fprint(a.stdout, st.SchemaSQL())
	return nil
}

// progress prints "<verb> N of TOTAL" on stderr at most once a second.
type progress struct {
	w     io.Writer
	verb  string
	total int64
	last  time.Time
	shown bool
}

func (a *app) progress(verb string, total int64) *progress {
	return &progress{w: a.stderr, verb: verb, total: total, last: time.Now()}
}

func (p *progress) report(done int64) {
	if time.Since(p.last) < time.Second {
		return
	}
	p.last = time.Now()
	p.shown = true
	fmt.Fprintf(p.w, "progress: %s %d of %d\n", p.verb, done, p.total)
}

func (p *progress) finish(done int64) {
	if p.shown {
		fmt.Fprintf(p.w, "progress: %s %d of %d, finished\n", p.verb, done, p.total)
	}
}

// eventJSON is an event in --json output.
type eventJSON struct {
	EventID       string            `json:"event_id"`
	EventType     string            `json:"event_type"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id,omitempty"`
	TenantID      string            `json:"tenant_id,omitempty"`
	Status        string            `json:"status"`
	Attempts      int               `json:"attempts"`
	CreatedAt     time.Time         `json:"created_at"`
	AvailableAt   time.Time         `json:"available_at"`
	DoneAt        *time.Time        `json:"done_at,omitempty"`
	LastError     string            `json:"last_error"`
	Headers       map[string]string `json:"headers,omitempty"`
	PayloadBytes  int               `json:"payload_bytes"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	PayloadBase64 string            `json:"payload_base64,omitempty"`
}

func toJSON(ev core.Event, withPayload bool) eventJSON {
	out := eventJSON{
		EventID: ev.ID(), EventType: ev.Type(), AggregateType: ev.AggregateType(), AggregateID: ev.AggregateID(),
		TenantID: ev.TenantID(), Status: ev.Status.String(), Attempts: ev.Attempts, CreatedAt: ev.CreatedAt,
		AvailableAt: ev.AvailableAt, LastError: ev.LastError, Headers: ev.Headers(), PayloadBytes: ev.PayloadLen(),
	}
	if !ev.DoneAt.IsZero() {
		t := ev.DoneAt
		out.DoneAt = &t
	}
	if withPayload {
		p := ev.Payload()
		if json.Valid(p) && len(p) > 0 {
			out.Payload = p
		} else {
			out.PayloadBase64 = base64.StdEncoding.EncodeToString(p)
		}
	}
	return out
}

// writeEvents prints one event per line under a header; empty fields are
// "-" so columns stay countable, and the last error comes last.
func writeEvents(w io.Writer, events []core.Event, withPayload bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "EVENT_ID\tCREATED_AT\tEVENT_TYPE\tAGGREGATE_TYPE\tAGGREGATE_ID\tATTEMPTS"
	if withPayload {
		header += "\tPAYLOAD"
	}
	fmt.Fprintln(tw, header+"\tLAST_ERROR")
	for _, ev := range events {
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%d", ev.ID(), ev.CreatedAt.Format(textTime), orDash(ev.Type()),
			orDash(ev.AggregateType()), orDash(oneLine(ev.AggregateID(), 0)), ev.Attempts)
		if withPayload {
			line += "\t" + payloadText(ev.Payload())
		}
		fmt.Fprintln(tw, line+"\t"+orDash(oneLine(ev.LastError, 200)))
	}
	_ = tw.Flush()
}

// payloadText is a payload on one line: compact JSON, or base64 with a
// "base64:" prefix.
func payloadText(p []byte) string {
	if len(p) > 0 && json.Valid(p) {
		var b bytes.Buffer
		if err := json.Compact(&b, p); err == nil {
			return b.String()
		}
	}
	return "base64:" + base64.StdEncoding.EncodeToString(p)
}

// oneLine replaces control characters (tabs, newlines) with spaces and cuts
// s to max runes (0: no cut).
func oneLine(s string, max int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if max > 0 {
		if r := []rune(s); len(r) > max {
			return string(r[:max]) + "..."
		}
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orAny(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
