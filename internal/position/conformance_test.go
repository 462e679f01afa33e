package position_test

import (
	"testing"

	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/storetest"
)

// TestConformance runs the store conformance suite (store/storetest) on
// position delivery's store wrapper, the store the Writer and the
// dispatcher use with outbox.DeliveryPosition: its inserts write unordered
// events as STREAM rows with positions, and everything else goes to the
// table's store. The checks whose subject is a claimable row inserted
// through the store under test cannot apply: a STREAM row is read by
// position, never claimed, leased or written back as a claimed row (the
// suite runs them on each store itself, which is the claim path position
// delivery's retries take). Those are skipped, each with its reason; the
// rest (inserts, their validation and atomicity, Get, bad table names,
// schema, locks, wake-ups) run as on the store.
func TestConformance(t *testing.T) {
	t.Parallel()
	for _, dialect := range testdb.Dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			cfg := testdb.Conformance(dialect, mysql.Config{})
			inner := cfg.NewTarget
			cfg.NewTarget = func(t testing.TB) storetest.Target {
				tg := inner(t)
				lg := position.LogOf(tg.Store)
				if lg == nil {
					t.Fatalf("%T has no position log", tg.Store)
				}
				tg.Store = position.WriterOnlyStore(tg.Store, lg, nil)
				// Position delivery writes ordered events as STREAM rows
				// too, delivered by the reader one at a time per key; the
				// suite's ordered checks claim them, so they do not apply
				// (this package's ordered tests cover that delivery).
				tg.Ordered = nil
				return tg
			}
			cfg.Skip = conformanceSkips(cfg.Server)
			storetest.Run(t, cfg)
		})
	}
}

// conformanceSkips returns the checks of the suite that cannot apply to
// STREAM rows, with the reason; server: the suite's Config.Server.
func conformanceSkips(server bool) map[string]string {
	const claimed = "works on rows it inserted through the store under test as claimable ones (claims, leases, " +
		"write-backs of claimed rows, NEW and DONE counts); position delivery writes them as STREAM rows, which no " +
		"claim reads and whose delivery the reader's position records, not the row (the suite checks the claim " +
		"path on the store itself)"
	const mixed = "expects the unordered events of a batch that mixes ordered and unordered ones on the claim path " +
		"(NEW, leased); position delivery writes them as STREAM rows and takes only the ordered ones to the claim path"
	skips := map[string]string{"OrderedInsertTakesSeqs": mixed, "OrderedBatchAcrossKeys": mixed}
	names := []string{
		"InsertBatchChunked", "InsertLeasedNotClaimableByOthers", "TimestampsKeepMicroseconds",
		"ClaimOrderAndLimit", "ClaimFrom", "ClaimRespectsAvailableAt", "ClaimSkipRecent", "ClaimLeaseExpiry",
		"ClaimReportsUndecodableRows", "ConcurrentClaimersDisjoint", "Release",
		"Fencing", "MarkDoneRetryDead", "MarksNeverMoveTerminalRows", "LastErrorTruncated",
		"MarkDoneBatch", "DeleteDoneBatch", "RenewLeases", "RenewLeasesLong",
		"DeadQueryCountReplay", "DeadReplayAllInBatches", "Purge", "Stats", "CountByType",
	}
	if server {
		names = append(names, "AbandonedLeaseReclaimedAndFenced", "DrainDisjoint", "DrainFromCursor")
	}
	for _, name := range names {
		skips[name] = claimed
	}
	return skips
}
