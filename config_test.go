package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/poller"
)

// TestConfigSetSeesEveryField sets each field of the component configs in
// turn and checks that the WriterOnly guard notices it, so that a field added
// later cannot slip past it.
func TestConfigSetSeesEveryField(t *testing.T) {
	t.Parallel()
	checkEveryField(t, dispatch.Config{}, func(v reflect.Value) bool { return outbox.DispatchSet(v.Interface().(dispatch.Config)) })
	checkEveryField(t, poller.Config{}, func(v reflect.Value) bool { return outbox.PollerSet(v.Interface().(poller.Config)) })
}

func checkEveryField(t *testing.T, zero any, set func(reflect.Value) bool) {
	t.Helper()
	typ := reflect.TypeOf(zero)
	if set(reflect.ValueOf(zero)) {
		t.Fatalf("zero %s reported as set", typ)
	}
	for i := range typ.NumField() {
		f := typ.Field(i)
		v := reflect.New(typ).Elem()
		v.Field(i).Set(nonZero(t, f.Type))
		if !set(v) {
			t.Errorf("%s.%s set, but reported as unset", typ, f.Name)
		}
	}
}

// nonZero returns a value of typ that a user could set.
func nonZero(t *testing.T, typ reflect.Type) reflect.Value {
	t.Helper()
	switch typ {
	case reflect.TypeFor[*slog.Logger]():
		return reflect.ValueOf(slog.New(slog.DiscardHandler))
	case reflect.TypeFor[core.RetryPolicy]():
		return reflect.ValueOf(&core.ExponentialBackoff{})
	case reflect.TypeFor[core.Metrics]():
		return reflect.ValueOf(core.NopMetrics{})
	case reflect.TypeFor[func() time.Time]():
		return reflect.ValueOf(time.Now)
	case reflect.TypeFor[*core.Registry]():
		return reflect.ValueOf(core.NewRegistry())
	}
	v := reflect.New(typ).Elem()
	switch typ.Kind() {
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(1)
	case reflect.String:
		v.SetString("x")
	case reflect.Slice:
		v.Set(reflect.MakeSlice(typ, 1, 1))
	case reflect.Interface:
		// Any non-nil value of the interface will do: a pointer to a type
		// implementing it is not at hand, so use a fake that does.
		fake, ok := fakes[typ]
		if !ok {
			t.Fatalf("no non-zero value for %s: add one to fakes", typ)
		}
		v.Set(reflect.ValueOf(fake))
	default:
		t.Fatalf("no non-zero value for %s", typ)
	}
	return v
}

var fakes = map[reflect.Type]any{
	reflect.TypeFor[core.Store]():     fakeStore{},
	reflect.TypeFor[core.DBTX]():      fakeDB{},
	reflect.TypeFor[poller.Handler](): fakeHandler{},
}

type fakeStore struct{ core.Store }

type fakeDB struct{ core.DBTX }

type fakeHandler struct{ poller.Handler }

// noRenewStore hides every optional capability of the store it embeds, lease
// renewal included: it has no Unwrap.
type noRenewStore struct{ core.Store }

// TestNewChecksLeaseAgainstDelivery covers the rule between the lease and
// the dispatcher's delivery bounds, which holds only for a store that cannot
// renew leases, and the rule that there is one lease.
func TestNewChecksLeaseAgainstDelivery(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	db, store := tg.DB, core.Store(noRenewStore{tg.Store})
	// With renewal a listener may be slower than the lease.
	for _, dc := range []dispatch.Config{
		{ListenerTimeout: time.Hour},
		{ListenerTimeout: time.Hour, LeaseTimeout: time.Second},
	} {
		ob, err := outbox.New(outbox.Config{DB: db, Store: tg.Store, Registry: core.NewRegistry(), Dispatch: dc})
		if err != nil {
			t.Errorf("renewing store, %+v: %v", dc, err)
			continue
		}
		if got := ob.Poller().LeaseTimeout(); got != ob.Dispatcher().LeaseTimeout() {
			t.Errorf("poller lease %s, dispatcher lease %s", got, ob.Dispatcher().LeaseTimeout())
		}
		_ = ob.Close(context.Background())
	}
	// Two different leases are refused.
	_, err := outbox.New(outbox.Config{DB: db, Store: tg.Store, Registry: core.NewRegistry(),
		Dispatch: dispatch.Config{LeaseTimeout: time.Minute}, Poller: poller.Config{LeaseTimeout: time.Second}})
	if !errorIsInvalid(err) || !mentions(err, "Poller.LeaseTimeout", "Dispatch.LeaseTimeout") {
		t.Errorf("two leases: %v; want an ErrInvalid naming both fields", err)
	}
	for _, tt := range []struct {
		name     string
		dispatch dispatch.Config
		poller   poller.Config
		ok       bool
	}{
		{"defaults", dispatch.Config{}, poller.Config{}, true},
		{"listener well within the default lease", dispatch.Config{ListenerTimeout: 20 * time.Second}, poller.Config{}, true},
		{"listener as long as the default lease", dispatch.Config{ListenerTimeout: core.DefaultLeaseTimeout}, poller.Config{}, false},
		{"short lease, no listener timeout", dispatch.Config{}, poller.Config{LeaseTimeout: time.Second}, true},
		{"lease shorter than the listener", dispatch.Config{ListenerTimeout: 10 * time.Second}, poller.Config{LeaseTimeout: 5 * time.Second}, false},
		{"lease covers the listener but not the linger", dispatch.Config{ListenerTimeout: time.Second, DoneBatchLinger: time.Second},
			poller.Config{LeaseTimeout: 1500 * time.Millisecond}, false},
		{"lease covers both", dispatch.Config{ListenerTimeout: time.Second, DoneBatchLinger: time.Second},
			poller.Config{LeaseTimeout: 2001 * time.Millisecond}, true},
		{"lease not above the default linger", dispatch.Config{}, poller.Config{LeaseTimeout: dispatch.DefaultDoneBatchLinger}, false},
	} {
		ob, err := outbox.New(outbox.Config{DB: db, Store: store, Registry: core.NewRegistry(), Dispatch: tt.dispatch, Poller: tt.poller})
		switch {
		case tt.ok && err != nil:
			t.Errorf("%s: %v", tt.name, err)
		case !tt.ok && err == nil:
			t.Errorf("%s: New accepted it", tt.name)
		case !tt.ok && !(errorIsInvalid(err) && mentions(err, "Poller.LeaseTimeout", "Dispatch.ListenerTimeout")):
			t.Errorf("%s: %v; want an ErrInvalid naming both fields", tt.name, err)
		}
		if ob != nil {
			_ = ob.Close(context.Background())
		}
	}
}

// TestLoggerIsSet: a nil component Logger is unset (and takes the
// Outbox's Logger), a discarding one is set (and stays the component's).
func TestLoggerIsSet(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	db, store := tg.DB, tg.Store
	if _, err := outbox.New(outbox.Config{DB: db, Store: store, Mode: outbox.WriterOnly,
		Dispatch: dispatch.Config{Logger: nil}}); err != nil {
		t.Fatalf("a nil Logger counts as a set Dispatch: %v", err)
	}
	if _, err := outbox.New(outbox.Config{DB: db, Store: store, Mode: outbox.WriterOnly,
		Dispatch: dispatch.Config{Logger: slog.New(slog.DiscardHandler)}}); !errorIsInvalid(err) {
		t.Fatalf("a discarding Logger is a set Dispatch: got %v", err)
	}
}

func errorIsInvalid(err error) bool { return errors.Is(err, core.ErrInvalid) }

// mentions reports whether err's message contains every one of words.
func mentions(err error, words ...string) bool {
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			return false
		}
	}
	return true
}
