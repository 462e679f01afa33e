package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/writectx"
	"github.com/outboxkit/outbox/outboxlog"
)

// WriterHook observes and shapes what a Writer writes. The
// lifecycle of one WriteAll is: BeforeWrite (may transform or suppress), the
// INSERT, AfterWrite, then AfterCommit or AfterRollback once the transaction
// ends. Errors and panics from AfterWrite, AfterCommit and AfterRollback are
// logged and never reach the caller.
type WriterHook interface {
	// BeforeWrite may return a different list; an empty list suppresses the
	// write. An error aborts the write and is returned to the caller.
	BeforeWrite(ctx context.Context, envs []Envelope) ([]Envelope, error)
	AfterWrite(ctx context.Context, envs []Envelope) error
	AfterCommit(ctx context.Context, envs []Envelope) error
	AfterRollback(ctx context.Context, envs []Envelope) error
}

// LeasingHook is a WriterHook that delivers events in this process after
// commit (the dispatcher's hot path). The Writer inserts its events already
// leased by LeaseOwner, so that other instances' pollers leave them alone; the
// hook releases the lease of any event it cannot take.
//
// Ordered events stored as StatusWaiting (see OrderedStore) are not leased and
// must not be delivered until promoted, so the Writer leaves them out of the
// lists a LeasingHook receives; other hooks receive every written envelope.
type LeasingHook interface {
	WriterHook
	LeaseOwner() string
}

// HookFuncs builds a WriterHook from optional functions.
type HookFuncs struct {
	BeforeWriteFunc   func(ctx context.Context, envs []Envelope) ([]Envelope, error)
	AfterWriteFunc    func(ctx context.Context, envs []Envelope) error
	AfterCommitFunc   func(ctx context.Context, envs []Envelope) error
	AfterRollbackFunc func(ctx context.Context, envs []Envelope) error
}

// BeforeWrite calls BeforeWriteFunc, or returns envs unchanged.
func (h HookFuncs) BeforeWrite(ctx context.Context, envs []Envelope) ([]Envelope, error) {
	if h.BeforeWriteFunc == nil {
		return envs, nil
	}
	return h.BeforeWriteFunc(ctx, envs)
}

// AfterWrite calls AfterWriteFunc if set.
func (h HookFuncs) AfterWrite(ctx context.Context, envs []Envelope) error {
	return callIf(h.AfterWriteFunc, ctx, envs)
}

// AfterCommit calls AfterCommitFunc if set.
func (h HookFuncs) AfterCommit(ctx context.Context, envs []Envelope) error {
	return callIf(h.AfterCommitFunc, ctx, envs)
}

// AfterRollback calls AfterRollbackFunc if set.
func (h HookFuncs) AfterRollback(ctx context.Context, envs []Envelope) error {
	return callIf(h.AfterRollbackFunc, ctx, envs)
}

func callIf(f func(context.Context, []Envelope) error, ctx context.Context, envs []Envelope) error {
	if f == nil {
		return nil
	}
	return f(ctx, envs)
}

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Store inserts the rows. Required.
	Store Store
	// Hook observes writes; the dispatcher's hook feeds its hot queue.
	// Default: none (the poller or CDC delivers).
	Hook WriterHook
	// Logger receives hook failures. Nil: outboxlog.Default(), which sends
	// warnings and errors to slog.Default(). slog.New(slog.DiscardHandler)
	// silences it; a zerolog.Logger zl is wired in with
	// slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
	// Now returns the current time. Default: time.Now.
	Now func() time.Time
	// NoNotify stops the Writer from signalling new events. By default,
	// when Store is an InsertNotifier (PostgreSQL), a write whose events
	// this process's hot path will not deliver (no LeasingHook, or a
	// transaction without after-commit callbacks such as a plain *sql.Tx)
	// also sends one notification in the same transaction, so that the
	// pollers watching the table, in every instance, claim the events as
	// soon as the transaction commits instead of at their next poll.
	NoNotify bool
	// ContextHeaders, when set, returns headers to add to every envelope
	// written in ctx: the trace context of the writing request (see the
	// nested module contrib/outboxotel), a request id. An envelope's own
	// header of the same key wins. Default: none.
	ContextHeaders func(ctx context.Context) map[string]string
}

// Writer inserts envelopes into the outbox table inside the caller's
// transaction. It is safe for concurrent use.
type Writer struct {
	store    Store
	notifier InsertNotifier // nil: no signal after writes
	// notified holds the core.Tx transactions (pointers) that have sent
	// their signal, until they end: one per transaction is enough.
	notified sync.Map
	hook     WriterHook
	headers  func(ctx context.Context) map[string]string
	owner    string
	ordered  OrderedStore // nil: the store orders nothing
	log      *slog.Logger
	now      func() time.Time
}

// NewWriter validates cfg and returns a Writer.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if cfg.Store == nil {
		return nil, Invalid("writer config", "Store is nil")
	}
	w := &Writer{store: cfg.Store, hook: cfg.Hook, headers: cfg.ContextHeaders, log: outboxlog.Or(cfg.Logger), now: cfg.Now}
	if w.now == nil {
		w.now = time.Now
	}
	if lh, ok := cfg.Hook.(LeasingHook); ok {
		w.owner = lh.LeaseOwner()
	}
	if o, ok := StoreAs[OrderedStore](cfg.Store); ok && len(o.Ordering()) > 0 {
		w.ordered = o
	}
	if n, ok := StoreAs[InsertNotifier](cfg.Store); ok && !cfg.NoNotify {
		w.notifier = n
	}
	return w, nil
}

// Write writes one envelope in the transaction ctx carries (see package txctx)
// and returns its event id, or "" if the hook suppressed it. Without a
// transaction in ctx it returns ErrNoTransaction and writes nothing.
func (w *Writer) Write(ctx context.Context, env Envelope) (string, error) {
	ids, err := w.WriteAll(ctx, []Envelope{env})
	if err != nil || len(ids) == 0 {
		return "", err
	}
	return ids[0], nil
}

// WriteAll writes envs in the transaction ctx carries and returns their event
// ids (empty when the hook suppressed them). Without a transaction in ctx it
// returns ErrNoTransaction and writes nothing.
func (w *Writer) WriteAll(ctx context.Context, envs []Envelope) ([]string, error) {
	tx, ok := TxFromContext(ctx)
	if !ok {
		return nil, errNoTxInContext
	}
	return w.write(ctx, tx, envs)
}

// errNoTxInContext is Write's error without a transaction in ctx: the
// first error most new users meet, so it names every way out.
var errNoTxInContext = fmt.Errorf("%w in ctx: events are written in the business transaction; "+
	"call Write inside ob.Do(ctx, fn) (outbox.Outbox.Do) or txctx.Manager.Do (pgxtx.Manager.Do on pgx, "+
	"or your ORM integration's transaction), or pass your transaction to Writer.WriteTx(ctx, tx, env)", ErrNoTransaction)

// WriteTx writes one envelope in the explicit transaction tx. See WriteAllTx.
func (w *Writer) WriteTx(ctx context.Context, tx DBTX, env Envelope) (string, error) {
	ids, err := w.WriteAllTx(ctx, tx, []Envelope{env})
	if err != nil || len(ids) == 0 {
		return "", err
	}
	return ids[0], nil
}

// WriteAllTx writes envs in the explicit transaction tx (a *sql.Tx, *sqlx.Tx or
// a core.Tx). A nil tx, and a pool or connection, are refused with
// ErrNoTransaction (the latter because the events would commit on their own). A bun.Tx is refused with an error
// matching ErrInvalid, because Bun rewrites the SQL it runs: pass its *sql.Tx
// (bunTx.Tx) instead. After-commit hooks run only when tx
// is a core.Tx (see package txctx); with a plain *sql.Tx the events are left
// for the poller.
func (w *Writer) WriteAllTx(ctx context.Context, tx DBTX, envs []Envelope) ([]string, error) {
	if isNil(tx) {
		return nil, fmt.Errorf("%w: WriteTx got a nil transaction (%T): pass the *sql.Tx (or *sqlx.Tx, core.Tx) "+
			"your code began and will commit, or call Write inside ob.Do(ctx, fn) or txctx.Manager.Do, which begin one", ErrNoTransaction, tx)
	}
	if _, isPool := tx.(TxBeginner); isPool {
		return nil, fmt.Errorf("%w: WriteTx got a connection pool or connection (%T), not a transaction, "+
			"so the events would commit on their own: begin a transaction (db.BeginTx) and pass it, "+
			"or call Write inside ob.Do(ctx, fn) or txctx.Manager.Do", ErrNoTransaction, tx)
	}
	if err := checkForeignTx(tx); err != nil {
		return nil, err
	}
	return w.write(ctx, tx, envs)
}

// isNil reports whether tx is nil or a nil pointer (a *sql.Tx variable
// never assigned), which would otherwise panic at the first statement.
func isNil(tx DBTX) bool {
	if tx == nil {
		return true
	}
	v := reflect.ValueOf(tx)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// bunPackage is the import path of the Bun ORM. Its handles (bun.Tx, *bun.DB,
// bun.Conn) have the methods of DBTX, so they compile as WriteTx's argument,
// but they run every query through Bun's own formatter, which knows only its
// own placeholders: the store's $1 placeholders reach PostgreSQL without
// their arguments ("there is no parameter $1"), and its ? placeholders are
// replaced by literals Bun formats. Nothing written that way can be trusted,
// so the Writer refuses these handles at once and names what to pass.
const bunPackage = "github.com/uptrace/bun"

// checkForeignTx refuses handles that look like a DBTX but do not run the
// store's SQL as written.
func checkForeignTx(tx DBTX) error {
	t := reflect.TypeOf(tx)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.PkgPath() != bunPackage {
		return nil
	}
	if t.Name() == "Tx" {
		return Invalid("transaction",
			"a bun.Tx runs queries through Bun's formatter, which drops the outbox's SQL arguments: "+
				"pass its *sql.Tx (bunTx.Tx) to WriteTx, or begin the transaction with "+
				"github.com/outboxkit/outbox/contrib/bun for delivery right after COMMIT")
	}
	return fmt.Errorf("%w: got a bun.%s, not a transaction: pass the *sql.Tx of a bun.Tx (bunTx.Tx)",
		ErrNoTransaction, t.Name())
}

func (w *Writer) write(ctx context.Context, db DBTX, envs []Envelope) ([]string, error) {
	if w.headers != nil {
		envs = withHeaders(envs, w.headers(ctx))
	}
	if w.hook != nil {
		var err error
		envs, err = w.beforeWrite(ctx, envs)
		if err != nil {
			return nil, err
		}
	}
	if len(envs) == 0 {
		return nil, nil
	}
	ids := make([]string, len(envs))
	var seen map[string]struct{} // a write of one event has no duplicate
	if len(envs) > 1 {
		seen = make(map[string]struct{}, len(envs))
	}
	for i, env := range envs {
		if err := env.Validate(); err != nil {
			return nil, fmt.Errorf("write event %d: %w", i, err)
		}
		if seen != nil {
			if _, dup := seen[env.id]; dup {
				return nil, fmt.Errorf("write event %d: %w: %s appears twice in one write", i, ErrDuplicateEvent, env.id)
			}
			seen[env.id] = struct{}{}
		}
		ids[i] = env.id
	}
	tx, hasCallbacks := db.(Tx)
	var opts InsertOptions
	if w.owner != "" && hasCallbacks {
		opts = InsertOptions{LeaseOwner: w.owner, LeaseAt: w.now()}
	}
	// An INSERT of events none of which is ordered returns nothing the
	// Writer reads (an ordered one returns its sequence numbers): a
	// transaction that holds writes may send it, and the signal below, with
	// its next statement (see package writectx).
	ictx := ctx
	if writectx.Holds(db, generatedIDs(envs)) && (w.ordered == nil || !anyOrdered(w.ordered.Ordering(), envs)) {
		ictx = writectx.Mark(ctx)
	}
	var waiting []string
	var err error
	if w.ordered != nil {
		var res InsertResult
		res, err = w.ordered.InsertOrdered(ictx, db, envs, opts)
		waiting = res.Waiting
		if err == nil && res.Seqs != nil {
			envs = slices.Clone(envs)
			for i := range envs {
				envs[i].seq = res.Seqs[i]
			}
		}
	} else {
		err = w.store.Insert(ictx, db, envs, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("write events: %w", err)
	}
	// Events not leased by this writer wait for a poller: tell the pollers
	// watching the table. The signal is part of the transaction, so it
	// reaches them only once the rows are committed and visible to their
	// claims, and never for a transaction that rolls back. Leased events
	// need none: the hot path delivers them, and no poller could claim them
	// before their lease expires. Nor do ordered events stored WAITING,
	// which no claim reads: each becomes NEW when its key's previous event
	// finishes, leased by the finisher, which delivers it. A write of
	// WAITING events only sends no signal, so that its transaction does
	// not queue for PostgreSQL's NOTIFY lock at commit while it holds its
	// keys' rows, which the keys' finishers wait for.
	if w.notifier != nil && opts.LeaseOwner == "" && len(waiting) < len(envs) {
		if err := w.notify(ictx, db); err != nil {
			return nil, fmt.Errorf("write events: %w", err)
		}
	}
	if w.hook == nil {
		return ids, nil
	}
	if w.owner != "" && len(waiting) > 0 {
		envs = withoutIDs(envs, waiting)
	}
	w.safely(ctx, "AfterWrite", envs, w.hook.AfterWrite)
	if hasCallbacks {
		tx.AfterCommit(func(ctx context.Context) { w.safely(ctx, "AfterCommit", envs, w.hook.AfterCommit) })
		tx.AfterRollback(func(ctx context.Context) { w.safely(ctx, "AfterRollback", envs, w.hook.AfterRollback) })
	}
	return ids, nil
}

// generatedIDs reports whether NewEnvelope generated the id of every event
// in envs.
func generatedIDs(envs []Envelope) bool {
	for i := range envs {
		if !envs[i].generatedID {
			return false
		}
	}
	return true
}

// anyOrdered reports whether an event in envs is of an aggregate type o
// orders.
func anyOrdered(o Ordering, envs []Envelope) bool {
	for i := range envs {
		if _, ok := o.Ordered(envs[i].aggregateType); ok {
			return true
		}
	}
	return false
}

// notify signals new events in db's transaction, once per transaction when db
// is a core.Tx whose end the Writer can observe (a pointer, so that it can key
// a map), once per write otherwise (a plain *sql.Tx ends unseen): the
// database delivers identical notifications of one transaction once anyway,
// and this spares the statements.
func (w *Writer) notify(ctx context.Context, db DBTX) error {
	tx, ok := db.(Tx)
	if !ok || reflect.TypeOf(tx).Kind() != reflect.Pointer {
		return w.notifier.NotifyInsert(ctx, db)
	}
	if _, sent := w.notified.LoadOrStore(tx, struct{}{}); sent {
		return nil
	}
	if err := w.notifier.NotifyInsert(ctx, db); err != nil {
		w.notified.Delete(tx)
		return err
	}
	forget := func(context.Context) { w.notified.Delete(tx) }
	tx.AfterCommit(forget)
	tx.AfterRollback(forget)
	return nil
}

func (w *Writer) beforeWrite(ctx context.Context, envs []Envelope) (out []Envelope, err error) {
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("writer hook BeforeWrite panicked: %v", r)
		}
	}()
	out, err = w.hook.BeforeWrite(ctx, envs)
	if err != nil {
		return nil, fmt.Errorf("writer hook BeforeWrite: %w", err)
	}
	return out, nil
}

// safely runs a hook stage, logging its error or panic instead of returning it.
func (w *Writer) safely(ctx context.Context, stage string, envs []Envelope, fn func(context.Context, []Envelope) error) {
	defer func() {
		if r := recover(); r != nil {
			w.log.LogAttrs(ctx, slog.LevelError, "outbox writer hook panicked",
				slog.String("stage", stage), slog.Int("events", len(envs)), outboxlog.Err(errors.New(fmt.Sprint(r))))
		}
	}()
	if err := fn(ctx, envs); err != nil {
		w.log.LogAttrs(ctx, slog.LevelError, "outbox writer hook failed",
			slog.String("stage", stage), slog.Int("events", len(envs)), outboxlog.Err(err))
	}
}

// withoutIDs returns the envelopes of envs whose id is not in ids, in order.
func withoutIDs(envs []Envelope, ids []string) []Envelope {
	skip := make(map[string]struct{}, len(ids))
	for _, id := range ids {
		skip[id] = struct{}{}
	}
	out := make([]Envelope, 0, len(envs)-len(ids))
	for _, env := range envs {
		if _, ok := skip[env.id]; !ok {
			out = append(out, env)
		}
	}
	return out
}
