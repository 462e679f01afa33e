package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/core"
)

// schemaTests check schema management.
var schemaTests = []test{
	{"CreateSchemaIdempotent", testCreateSchemaIdempotent},
}

// BadTableNames are names every store must reject.
var BadTableNames = []string{
	`outbox"; DROP TABLE users; --`,
	"outbox; DELETE FROM outbox_event",
	"outbox/**/x",
	"outbox -- comment",
	"out box",
	"`outbox`",
	"'outbox'",
	"1outbox",
	"outbox.event.extra",
	".outbox",
	"outbox.",
	"ou\x00tbox",
	"outbøx",
	strings.Repeat("x", 64),
}

func testBadTableNames(t *testing.T, newStore func(table string) (core.Store, error)) {
	for _, name := range BadTableNames {
		if _, err := newStore(name); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("table %q: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := newStore(strings.Repeat("x", 63)); err != nil {
		t.Errorf("63-char name rejected: %v", err)
	}
	st, err := newStore("")
	if err != nil {
		t.Fatalf("default name: %v", err)
	}
	if named, ok := core.StoreAs[interface{ Table() string }](st); ok && named.Table() != "outbox_event" {
		t.Errorf("default name: %q, want outbox_event", named.Table())
	}
}

func testCreateSchemaIdempotent(t *testing.T, tg Target) {
	seq(t, tg, "idem", 1)
	sm, ok := core.StoreAs[interface {
		CreateSchema(ctx context.Context, db core.DBTX) error
	}](tg.Store)
	if !ok {
		t.Skipf("%T has no CreateSchema", tg.Store)
	}
	if err := sm.CreateSchema(ctx(t), tg.DB); err != nil {
		t.Fatalf("second CreateSchema: %v", err)
	}
	if count(t, tg, "1 = 1") != 1 {
		t.Fatalf("CreateSchema lost rows")
	}
}
