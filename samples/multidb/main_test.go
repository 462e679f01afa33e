package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := `1. order o-1 commits in orders.db; its listener hands over to billing.db
   [orders.db ] OrderPlaced o-1: requesting an invoice in billing.db
   [billing.db] InvoiceRequested inv-o-1: invoice issued
2. order o-2 rolls back in orders.db: no row, no event, nothing in billing.db
3. both databases listen to Audit; each event reaches its own database's listener only
   [orders.db ] Audit {"from":"orders.db"}
   [billing.db] Audit {"from":"billing.db"}
4. what each outbox table holds:
   orders.db  Order      o-1      OrderPlaced      DONE
   orders.db  __GLOBAL__          Audit            DONE
   billing.db Invoice    inv-o-1  InvoiceRequested DONE
   billing.db __GLOBAL__          Audit            DONE
   billing.db invoices: 1
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
