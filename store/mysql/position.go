package mysql

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/store/internal/schemacheck"
	"github.com/outboxkit/outbox/store/internal/sqlstore"
)

// positionSQL: MariaDB only (a SEQUENCE, INSERT ... RETURNING); positions
// from the table's sequence, gaps final by the start times of InnoDB
// transactions. docs/design/position.md has the argument; in short:
//
//   - NextPos reads the position table before it takes NEXTVAL: an
//     aggregate over the table's rows evaluates its select list after it
//     has read them, and the read starts the caller's InnoDB transaction,
//     so that it is in information_schema.innodb_trx, with a trx_started
//     at or before the moment it took the position. A bare NEXTVAL in
//     VALUES is evaluated before InnoDB starts the transaction (at its
//     first row write); TestNextPosAfterRead checks both. The read is a
//     locking one in an INSERT (REPEATABLE READ): it looks for a relay no
//     row has ('~' sorts after "default"), so that its lock, held to the
//     caller's commit, is on the gap after the reader's row and blocks
//     none of the reader's writes of that row (only its first INSERT,
//     into an empty table, waits for the open transactions). A derived
//     table around the read did the same at 10-15 µs more server CPU per
//     INSERT (it is materialised).
//   - Token is the wall clock (µs) when a read returns its rows, after its
//     snapshot: a position below the largest it saw, not seen, was taken by
//     a transaction that began before it.
//   - Horizon is one µs below the second of the oldest running InnoDB
//     transaction, but only when the query finds its own transaction in
//     innodb_trx: InnoDB refreshes that view only when nobody read it in
//     the last 100 ms, and a stale view misses young transactions. A stale
//     view gives 0 (no gap final this cycle), and the reader asks at most
//     every 200 ms, so that its own questions do not keep the view stale.
//   - Times are read in the SYSTEM time zone, in which InnoDB writes
//     trx_started; checkPosition refuses a system zone with daylight
//     saving time, whose repeated hour would read an hour late.
var positionSQL = &sqlstore.PositionSQL{
	NextPos: "(SELECT NEXTVAL({{posseq}}) + 0 * COUNT(*) FROM {{postable}} WHERE relay = '~')",
	Token:   "CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED)",
	Horizon: systemTZ + "SELECT CASE WHEN SUM(trx_mysql_thread_id = CONNECTION_ID()) > 0 " +
		"THEN CAST(UNIX_TIMESTAMP(MIN(trx_started)) AS SIGNED) * 1000000 - 1 ELSE 0 END, " +
		"CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS SIGNED) FROM information_schema.innodb_trx",
	HorizonInTx:     true,
	HorizonWarnings: true,
	HorizonEvery:    200 * time.Millisecond,
	ReadPrefix:      systemTZ,
	ClaimInTx:       true,
	InsertIgnore:    "ON DUPLICATE KEY UPDATE relay = relay",
}

// systemTZ makes a statement read times in the server's system time zone,
// that of innodb_trx.trx_started.
const systemTZ = "SET STATEMENT time_zone = 'SYSTEM' FOR "

// positionProvider gives Store the position.Source capability without
// showing it in the package's API.
type positionProvider = position.Provider

// newPositionProvider returns the position.Source of s, for New.
func newPositionProvider(s *Store) positionProvider { return position.NewProvider(s.newPositionLog) }

// newPositionLog returns the store side of position delivery
// (outbox.DeliveryPosition), for package outbox (through position.LogOf). It runs on MariaDB only:
// its CheckSchema, which outbox.Outbox.Start calls, refuses MySQL and a
// MariaDB server it cannot run on (see checkPosition).
func (s *Store) newPositionLog() position.Log { return s.shared.PositionLog(s.checkPosition) }

// MariaDB server error numbers of the checks.
const errSpecificAccessDenied = 1227 // ER_SPECIFIC_ACCESS_DENIED_ERROR

// checkPosition is the schema check of a table used by position delivery,
// after the checks of the server: MariaDB 10.5 or later, the PROCESS
// privilege (information_schema.innodb_trx lists every transaction),
// SYSDATE() not NOW(), a system time zone without daylight saving time.
// Each failure returns an error matching core.ErrInvalid that names the
// way out.
func (s *Store) checkPosition(ctx context.Context, db core.DBTX) error {
	var version string
	var sysdateReads int
	var dst int64
	// SYSDATE() is later than NOW() after a sleep, unless the server runs
	// with --sysdate-is-now (an option, not a variable).
	err := db.QueryRowContext(ctx, systemTZ+"SELECT VERSION(), IF(SLEEP(0.002) = 0, SYSDATE(6) > NOW(6), 0), "+
		"UNIX_TIMESTAMP('2001-07-01 12:00:00') - UNIX_TIMESTAMP('2001-01-01 12:00:00')").Scan(&version, &sysdateReads, &dst)
	if err != nil && !strings.Contains(version, "MariaDB") {
		// MySQL has no SET STATEMENT: ask for the version alone.
		if err2 := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err2 != nil {
			return fmt.Errorf("check position delivery: %w", err2)
		}
	}
	if !strings.Contains(version, "MariaDB") || mariaDBVersion(version) < 100500 {
		return core.Invalid("Delivery", "DeliveryPosition on %s needs MariaDB 10.5 or later (sequences, INSERT ... "+
			"RETURNING); server %s: use DeliveryClaim", s.Table(), version)
	}
	if err != nil {
		return fmt.Errorf("check position delivery: %w", err)
	}
	if sysdateReads != 1 {
		return core.Invalid("Delivery", "DeliveryPosition needs SYSDATE() to read the clock (the server runs with "+
			"--sysdate-is-now): restart it without, or use DeliveryClaim")
	}
	if const181Days := int64(181 * 24 * 3600); dst != const181Days {
		return core.Invalid("Delivery", "DeliveryPosition reads transaction start times in the server's system time "+
			"zone, which has daylight saving time (an hour repeats once a year): run the server in a zone without it "+
			"(TZ=UTC), or use DeliveryClaim")
	}
	var n int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.innodb_trx").Scan(&n); err != nil {
		if errorNumber(err) == errSpecificAccessDenied {
			return core.Invalid("Delivery", "DeliveryPosition on MariaDB reads information_schema.innodb_trx, which "+
				"needs the PROCESS privilege: GRANT PROCESS ON *.* TO the outbox's user, or use DeliveryClaim (%v)", err)
		}
		return fmt.Errorf("check position delivery: %w", err)
	}
	if err := schemacheck.Check(ctx, db, s.schemaTarget(true)); err != nil {
		return err
	}
	seq := s.table.PosSeq()
	var seqs int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.tables "+
		"WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND table_type = 'SEQUENCE'",
		nullIfEmpty(seq.Schema), seq.Name).Scan(&seqs); err != nil {
		return fmt.Errorf("check position delivery: %w", err)
	}
	if seqs == 0 {
		return &core.SchemaError{Table: s.Table(), Exists: true, Version: schemacheck.Version - 1,
			Want: schemacheck.Version, Missing: []string{"sequence " + seq.String()}}
	}
	return nil
}

// mariaDBVersion returns 100511 for "10.5.11-MariaDB...", 0 when version
// does not start with a version number.
func mariaDBVersion(version string) int {
	var major, minor, patch int
	if _, err := fmt.Sscanf(version, "%d.%d.%d", &major, &minor, &patch); err != nil {
		return 0
	}
	return major*10000 + minor*100 + patch
}

// PosTable returns the table of the persisted position of position
// delivery: the table's name with "_pos" appended.
func (s *Store) PosTable() string { return s.shared.PosTable() }
