package postgres

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/internal/sqlstore"
)

//go:embed schema_partitioned.sql
var partitionedDDL string

// Defaults of Partitions.
const (
	DefaultPartitionInterval    = 24 * time.Hour
	DefaultPartitionsAhead      = 3
	DefaultPartitionLockTimeout = 2 * time.Second
)

// maxCreatePerRun caps the partitions one maintenance run creates, so that
// a run after a long pause (or a huge Ahead) stays short; the next run goes
// on where it stopped.
const maxCreatePerRun = 400

// Partitions configures a partitioned table (Config.Partitions): a
// PostgreSQL table partitioned by RANGE of event_id, one partition per
// Interval of event-id time. Event ids made by the library (core.NewEventID)
// are ULIDs, whose first ten characters encode their creation time and sort
// in time order, so each partition holds the events created in its
// interval, and the purge drops a whole partition once every row in it is
// purgeable instead of deleting its rows one by one. event_id stays the
// primary key, unique across the table.
//
// Rows whose ids are not ULIDs of the partitions' times are kept too: ids
// before the first partition go to the partition "<table>_pbefore", ids
// from "1" up (ids that do not start with a ULID's "0": caller-chosen ids
// such as "order-42", UUIDs from 1xxxxxxx up) to "<table>_pother", and the
// rest (ULIDs beyond the partitions made so far, ids such as "0abc") to the
// DEFAULT partition "<table>_pdefault". Those three are never dropped; the
// purge deletes their old rows one by one, as on a plain table.
type Partitions struct {
	// Interval is the span of event-id time one partition holds, in whole
	// minutes, at least one minute. Partition starts are multiples of it
	// since the zero time.Time, in UTC (with a day: midnight UTC). Default
	// 24 hours. All processes sharing the table must use the same.
	Interval time.Duration
	// Ahead is how many partitions after the current one CreateSchema and
	// MaintainPartitions make ahead of time. Default 3.
	Ahead int
	// LockTimeout bounds how long a partition's creation or drop waits for
	// the table's lock (PostgreSQL's lock_timeout): both take an ACCESS
	// EXCLUSIVE lock on the table for a moment, and a long-running
	// transaction that wrote to the table delays them, and every statement
	// queued behind them. A run that times out changes nothing and is tried
	// again by the next one. Default 2 seconds.
	LockTimeout time.Duration
}

func (p Partitions) withDefaults() (Partitions, error) {
	switch {
	case p.Interval < 0 || p.Interval > 0 && (p.Interval < time.Minute || p.Interval%time.Minute != 0):
		return p, core.Invalid("partition interval", "%s is not a whole number of minutes of at least one minute", p.Interval)
	case p.Ahead < 0:
		return p, core.Invalid("partitions ahead", "%d is negative", p.Ahead)
	case p.LockTimeout < 0:
		return p, core.Invalid("partition lock timeout", "%s is negative", p.LockTimeout)
	}
	if p.Interval == 0 {
		p.Interval = DefaultPartitionInterval
	}
	if p.Ahead == 0 {
		p.Ahead = DefaultPartitionsAhead
	}
	if p.LockTimeout == 0 {
		p.LockTimeout = DefaultPartitionLockTimeout
	}
	return p, nil
}

// Partition is one partition of a partitioned table (ListPartitions).
type Partition struct {
	// Name is the partition's table, schema-qualified when the outbox table is.
	Name string
	// From and To are the partition's event_id bounds (From included, To
	// excluded); "" stands for no bound (MINVALUE, MAXVALUE). Both are ""
	// for the DEFAULT partition.
	From, To string
	// Default marks the DEFAULT partition.
	Default bool
	// Start and End are the event-id times of a time partition (both bounds
	// ULID times); zero for the others.
	Start, End time.Time
}

// Timed reports whether p is a time partition, the kind the purge drops.
func (p Partition) Timed() bool { return !p.Start.IsZero() }

// ErrNotPartitioned is returned by the partition methods of a store whose
// table exists but is a plain table: MigrateToPartitioned converts it.
var ErrNotPartitioned = errors.New("outbox table is not partitioned")

// partitioner holds what the partition methods need of a store.
type partitioner struct {
	table sqlstore.TableName
	cfg   Partitions
}

func quote(s string) string { return `"` + s + `"` }

// idBound returns the ten-character event_id bound of time t: every ULID
// made at or after t (to the millisecond) sorts at or after it, every ULID
// made before t sorts before it.
func idBound(t time.Time) string {
	var id ulid.ULID
	if err := id.SetTime(ulid.Timestamp(t)); err != nil {
		// Beyond ULID time (year 10889): the top of the ULID space.
		return "7ZZZZZZZZZ"
	}
	return id.String()[:10]
}

var boundRE = regexp.MustCompile(`^[0-7][0-9A-HJKMNP-TV-Z]{9}$`)

// boundTime decodes a bound made by idBound; ok is false for anything else.
func boundTime(b string) (time.Time, bool) {
	if !boundRE.MatchString(b) {
		return time.Time{}, false
	}
	id, err := ulid.ParseStrict(b + "0000000000000000")
	if err != nil {
		return time.Time{}, false
	}
	return ulid.Time(id.Time()).UTC(), true
}

// otherFrom is the lower bound of the partition of ids that are no ULIDs of
// today (the first character of every ULID up to the year 3084 is "0").
const otherFrom = "1"

// name returns the qualified table name of the partition with suffix.
func (p *partitioner) name(suffix string) sqlstore.TableName {
	return sqlstore.TableName{Schema: p.table.Schema, Name: p.table.IndexName(suffix)}
}

// timedSuffix names the partition starting at start.
func (p *partitioner) timedSuffix(start time.Time) string {
	if p.cfg.Interval%(24*time.Hour) == 0 {
		return "p" + start.UTC().Format("20060102")
	}
	return "p" + start.UTC().Format("20060102_1504")
}

// intervalStart returns the start of the interval holding t.
func (p *partitioner) intervalStart(t time.Time) time.Time {
	return t.UTC().Truncate(p.cfg.Interval)
}

// inTx runs fn in a transaction begun on db, or directly on db when db is
// already one.
func inTx(ctx context.Context, db core.DBTX, fn func(tx core.DBTX) error) error {
	return sqlstore.InTx(ctx, db, nil, fn)
}

// lockDDL takes the transaction-level advisory lock that serialises the
// partition changes of all processes on the table, then sets the lock
// timeout of the transaction's DDL. The wait for the advisory lock is not
// bounded by it: the process that holds it is making the same partitions.
func (p *partitioner) lockDDL(ctx context.Context, tx core.DBTX) error {
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", "outbox partitions "+p.table.String()); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", p.cfg.LockTimeout.Milliseconds()))
	return err
}

// relkind returns the kind of the table ('r' plain, 'p' partitioned), or 0
// when it does not exist.
func (p *partitioner) relkind(ctx context.Context, db core.DBTX) (byte, error) {
	var kind sql.NullString
	err := db.QueryRowContext(ctx, "SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)", p.table.Quoted(quote)).Scan(&kind)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !kind.Valid {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return kind.String[0], nil
}

var rangeRE = regexp.MustCompile(`^FOR VALUES FROM \((MINVALUE|'[^']*')\) TO \((MAXVALUE|'[^']*')\)$`)

// list returns the partitions of the table, time partitions in time order
// after the others.
func (p *partitioner) list(ctx context.Context, db core.DBTX) ([]Partition, error) {
	rows, err := db.QueryContext(ctx, "SELECT n.nspname, c.relname, pg_get_expr(c.relpartbound, c.oid) "+
		"FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace "+
		"WHERE i.inhparent = to_regclass($1)", p.table.Quoted(quote))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var parts []Partition
	for rows.Next() {
		var schema, name, bound string
		if err := rows.Scan(&schema, &name, &bound); err != nil {
			return nil, err
		}
		part := Partition{Name: name}
		if p.table.Schema != "" {
			part.Name = schema + "." + name
		}
		if bound == "DEFAULT" {
			part.Default = true
			parts = append(parts, part)
			continue
		}
		m := rangeRE.FindStringSubmatch(bound)
		if m == nil {
			return nil, fmt.Errorf("partition %s: unexpected bound %q", part.Name, bound)
		}
		part.From, part.To = strings.Trim(strings.TrimPrefix(m[1], "MINVALUE"), "'"), strings.Trim(strings.TrimPrefix(m[2], "MAXVALUE"), "'")
		start, ok1 := boundTime(part.From)
		end, ok2 := boundTime(part.To)
		if ok1 && ok2 {
			part.Start, part.End = start, end
		}
		parts = append(parts, part)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(parts, func(a, b Partition) int {
		// Catch-alls (DEFAULT last), then time partitions, by From.
		rank := func(p Partition) int {
			switch {
			case p.Timed():
				return 2
			case p.Default:
				return 1
			}
			return 0
		}
		if c := rank(a) - rank(b); c != 0 {
			return c
		}
		return strings.Compare(a.From, b.From)
	})
	return parts, nil
}

// ListPartitions returns the partitions of the store's table: those of
// ids before the time partitions ("<table>_pbefore") and of non-ULID ids
// ("<table>_pother"), the DEFAULT partition, then the time partitions,
// oldest first. On a plain table it returns ErrNotPartitioned.
func (s *Store) ListPartitions(ctx context.Context, db core.DBTX) ([]Partition, error) {
	p := s.partitioner()
	kind, err := p.relkind(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	switch kind {
	case 0:
		return nil, fmt.Errorf("list partitions: table %s does not exist", s.Table())
	case 'p':
	default:
		return nil, fmt.Errorf("list partitions of %s: %w", s.Table(), ErrNotPartitioned)
	}
	parts, err := p.list(ctx, db)
	if err != nil {
		return nil, fmt.Errorf("list partitions: %w", err)
	}
	return parts, nil
}

// partitioner returns the partition settings of s; a store without
// Config.Partitions gets the defaults, for ListPartitions and
// MigrateToPartitioned's checks.
func (s *Store) partitioner() *partitioner {
	if s.parts != nil {
		return s.parts
	}
	cfg, _ := Partitions{}.withDefaults()
	t, _ := sqlstore.ParseTableName(s.Table(), true)
	return &partitioner{table: t, cfg: cfg}
}

// ensure makes the partitions the table lacks, in one transaction: the
// three catch-all partitions, then the time partitions from the end of the
// newest one (or the current interval, on a new table) through Ahead
// intervals after the current one. It returns the names it created.
func (p *partitioner) ensure(ctx context.Context, db core.DBTX, now time.Time) (created []string, err error) {
	err = inTx(ctx, db, func(tx core.DBTX) error {
		created = created[:0]
		if err := p.lockDDL(ctx, tx); err != nil {
			return err
		}
		kind, err := p.relkind(ctx, tx)
		if err != nil {
			return err
		}
		if kind != 'p' {
			return fmt.Errorf("%s: %w (MigrateToPartitioned converts a plain table)", p.table, ErrNotPartitioned)
		}
		parts, err := p.list(ctx, tx)
		if err != nil {
			return err
		}
		var hasBefore, hasOther, hasDefault bool
		var last time.Time // end of the newest time partition
		for _, part := range parts {
			switch {
			case part.Default:
				hasDefault = true
			case part.From == "":
				hasBefore = true
			case part.To == "":
				hasOther = true
			case part.Timed():
				last = part.End
			}
		}
		current := p.intervalStart(now)
		from := current
		if !last.IsZero() {
			// After the newest partition, also when it ends before the
			// current interval: a pause of maintenance leaves no gap.
			from = last
		}
		create := func(suffix, bounds string) error {
			name := p.name(suffix)
			if _, err := tx.ExecContext(ctx, "CREATE TABLE "+name.Quoted(quote)+" PARTITION OF "+p.table.Quoted(quote)+" "+bounds); err != nil {
				return fmt.Errorf("create partition %s: %w", name, err)
			}
			created = append(created, name.String())
			return nil
		}
		if !hasBefore && last.IsZero() {
			if err := create("pbefore", "FOR VALUES FROM (MINVALUE) TO ('"+idBound(from)+"')"); err != nil {
				return err
			}
		}
		if !hasOther {
			if err := create("pother", "FOR VALUES FROM ('"+otherFrom+"') TO (MAXVALUE)"); err != nil {
				return err
			}
		}
		if !hasDefault {
			if err := create("pdefault", "DEFAULT"); err != nil {
				return err
			}
		}
		until := current.Add(time.Duration(p.cfg.Ahead+1) * p.cfg.Interval)
		for n := 0; from.Before(until) && n < maxCreatePerRun; n++ {
			to := from.Add(p.cfg.Interval)
			if err := p.createTimed(ctx, tx, from, to); err != nil {
				return err
			}
			created = append(created, p.name(p.timedSuffix(from)).String())
			from = to
		}
		return nil
	})
	return created, err
}

// createTimed creates the time partition [from, to). Rows of that range
// already in the DEFAULT partition (written while no partition held their
// time) move into it: the partition is made as a table of its own, the rows
// moved, and the table attached.
func (p *partitioner) createTimed(ctx context.Context, tx core.DBTX, from, to time.Time) error {
	name := p.name(p.timedSuffix(from)).Quoted(quote)
	lo, hi := idBound(from), idBound(to)
	bounds := "FOR VALUES FROM ('" + lo + "') TO ('" + hi + "')"
	def := p.name("pdefault").Quoted(quote)
	var stray bool
	if err := tx.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM "+def+" WHERE event_id >= $1 AND event_id < $2)", lo, hi).Scan(&stray); err != nil {
		return fmt.Errorf("create partition %s: %w", name, err)
	}
	stmts := []string{"CREATE TABLE " + name + " PARTITION OF " + p.table.Quoted(quote) + " " + bounds}
	if stray {
		stmts = []string{
			"CREATE TABLE " + name + " (LIKE " + p.table.Quoted(quote) + " INCLUDING DEFAULTS)",
			"WITH moved AS (DELETE FROM " + def + " WHERE event_id >= '" + lo + "' AND event_id < '" + hi + "' RETURNING *) " +
				"INSERT INTO " + name + " SELECT * FROM moved",
			"ALTER TABLE " + p.table.Quoted(quote) + " ATTACH PARTITION " + name + " " + bounds,
		}
	}
	for _, stmt := range stmts {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create partition %s: %w", name, err)
		}
	}
	return nil
}

// busySQL is the check that a partition holds a row the row-by-row purge
// would keep: each EXISTS walks one partial index of the partition.
func busySQL(part string, keepDead bool) string {
	status := func(sts ...core.Status) string { return sqlstore.StatusSQL(sts...) }
	dead := "SELECT 1 FROM " + part + " WHERE status = " + status(core.StatusDead) + " AND (done_at IS NULL OR done_at >= $2)"
	if keepDead {
		dead = "SELECT 1 FROM " + part + " WHERE status = " + status(core.StatusDead) + " AND $2::timestamptz IS NULL"
	}
	return "SELECT EXISTS (SELECT 1 FROM " + part + " WHERE status IN (" + status(core.StatusNew, core.StatusRetry) + "))" +
		" OR EXISTS (SELECT 1 FROM " + part + " WHERE status = " + status(core.StatusWaiting) + ")" +
		" OR EXISTS (SELECT 1 FROM " + part + " WHERE status = " + status(core.StatusDone) + " AND done_at >= $1)" +
		" OR EXISTS (" + dead + ")"
}

// dropOld drops the time partitions that end before the purge's cutoffs and
// hold only rows the purge would delete (DONE before pp.DoneBefore, DEAD
// before pp.DeadBefore; with a zero DeadBefore a DEAD row keeps its
// partition). Each drop runs in a transaction of its own that locks the
// table and checks the partition again first. It returns the dropped
// partitions' names.
func (p *partitioner) dropOld(ctx context.Context, db core.DBTX, pp core.PurgeParams) ([]string, error) {
	if pp.DoneBefore.IsZero() {
		return nil, nil
	}
	cutoff := pp.DoneBefore
	if !pp.DeadBefore.IsZero() && pp.DeadBefore.Before(cutoff) {
		cutoff = pp.DeadBefore
	}
	parts, err := p.list(ctx, db)
	if err != nil {
		return nil, err
	}
	doneBefore := pp.DoneBefore.UTC().Truncate(time.Microsecond)
	var deadBefore any
	if !pp.DeadBefore.IsZero() {
		deadBefore = pp.DeadBefore.UTC().Truncate(time.Microsecond)
	}
	var dropped []string
	for _, part := range parts {
		if !part.Timed() || part.End.After(cutoff) {
			continue
		}
		name, err := sqlstore.ParseTableName(part.Name, true)
		if err != nil {
			return dropped, err
		}
		q := busySQL(name.Quoted(quote), deadBefore == nil)
		var busy bool
		if err := db.QueryRowContext(ctx, q, doneBefore, deadBefore).Scan(&busy); err != nil {
			return dropped, fmt.Errorf("check partition %s: %w", part.Name, err)
		}
		if busy {
			continue
		}
		err = inTx(ctx, db, func(tx core.DBTX) error {
			if err := p.lockDDL(ctx, tx); err != nil {
				return err
			}
			// The table first, as every statement on it locks it before its
			// partitions: no deadlock with them.
			if _, err := tx.ExecContext(ctx, "LOCK TABLE "+p.table.Quoted(quote)+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				return err
			}
			var exists bool
			if err := tx.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", name.Quoted(quote)).Scan(&exists); err != nil || !exists {
				busy = true // dropped by another process meanwhile
				return err
			}
			if err := tx.QueryRowContext(ctx, q, doneBefore, deadBefore).Scan(&busy); err != nil || busy {
				return err
			}
			_, err := tx.ExecContext(ctx, "DROP TABLE "+name.Quoted(quote))
			return err
		})
		if err != nil {
			return dropped, fmt.Errorf("drop partition %s: %w", part.Name, err)
		}
		if !busy {
			dropped = append(dropped, part.Name)
		}
	}
	return dropped, nil
}

// MaintainPartitions keeps the partitions of a partitioned store's table
// (Config.Partitions): it creates the missing ones up to Partitions.Ahead
// intervals after now, then, when p sets cutoffs, drops each time partition
// that ends before them and holds only rows a Purge with p would delete.
// It returns the names of the partitions it created and dropped. The purger
// (package purge) calls it at the start of every run; CreateSchema creates
// the partitions too. Several processes may run it at once: they take
// turns on an advisory lock of the table. On a store without
// Config.Partitions it does nothing; on a plain table it returns
// ErrNotPartitioned.
func (s *Store) MaintainPartitions(ctx context.Context, db core.DBTX, now time.Time, p core.PurgeParams) (created, dropped []string, err error) {
	if s.parts == nil {
		return nil, nil, nil
	}
	if created, err = s.parts.ensure(ctx, db, now); err != nil {
		return nil, nil, fmt.Errorf("maintain partitions: %w", err)
	}
	if dropped, err = s.parts.dropOld(ctx, db, p); err != nil {
		return created, dropped, fmt.Errorf("maintain partitions: %w", err)
	}
	return created, dropped, nil
}

// Partitioned reports whether the store was configured with
// Config.Partitions.
func (s *Store) Partitioned() bool { return s.parts != nil }

// MigrateToPartitioned converts the store's table, made by an earlier
// CreateSchema or by the versioned migrations, into the partitioned table of
// Config.Partitions, keeping every row: in one transaction it adds ordered
// delivery to the old table if it lacks it, renames it, creates the
// partitioned table and its partitions, copies the rows and drops the old
// table. Rows of earlier times land in the partition "<table>_pbefore",
// whose rows the purge deletes one by one as they age. It returns the rows
// copied. The table is locked (ACCESS EXCLUSIVE) from the start to the
// commit, so writers and pollers wait for the copy: run it when the table
// is small (after a purge) or in a maintenance window. The lock wait itself
// is bounded by Partitions.LockTimeout.
//
// On a table already partitioned it only creates missing partitions, and
// on a missing table it creates the partitioned table, so running it again
// is harmless. The store must have Config.Partitions (else core.ErrInvalid).
func (s *Store) MigrateToPartitioned(ctx context.Context, db core.DBTX) (int64, error) {
	if s.parts == nil {
		return 0, core.Invalid("migrate to partitioned", "the store has no Config.Partitions")
	}
	p := s.parts
	var copied int64
	err := inTx(ctx, db, func(tx core.DBTX) error {
		if err := p.lockDDL(ctx, tx); err != nil {
			return err
		}
		kind, err := p.relkind(ctx, tx)
		if err != nil {
			return err
		}
		if kind == 'p' || kind == 0 {
			return s.CreateSchema(ctx, tx)
		}
		if kind != 'r' {
			return fmt.Errorf("%s is not a table (relkind %c)", p.table, kind)
		}
		old := p.name("plain")
		plain, err := sqlstore.New(dialect(), p.table).WithOrdering(nil)
		if err != nil {
			return err
		}
		stmts := sqlstore.SplitStatements(plain.UpgradeOrderingSQL())
		stmts = append(stmts, "LOCK TABLE "+p.table.Quoted(quote)+" IN ACCESS EXCLUSIVE MODE",
			"ALTER TABLE "+p.table.Quoted(quote)+" RENAME TO "+quote(old.Name))
		for _, stmt := range stmts {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return err
			}
		}
		// The old indexes and primary key free their names for the new table's.
		var pkey sql.NullString
		if err := tx.QueryRowContext(ctx, "SELECT max(conname) FROM pg_constraint WHERE conrelid = to_regclass($1) AND contype = 'p'",
			old.Quoted(quote)).Scan(&pkey); err != nil {
			return err
		}
		if pkey.Valid {
			if _, err := tx.ExecContext(ctx, "ALTER TABLE "+old.Quoted(quote)+" DROP CONSTRAINT "+quote(pkey.String)); err != nil {
				return err
			}
		}
		for _, suffix := range []string{"pending", "dead", "done", "seq", "waiting"} {
			idx := sqlstore.TableName{Schema: p.table.Schema, Name: p.table.IndexName(suffix)}
			if _, err := tx.ExecContext(ctx, "DROP INDEX IF EXISTS "+idx.Quoted(quote)); err != nil {
				return err
			}
		}
		if err := s.CreateSchema(ctx, tx); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, "INSERT INTO "+p.table.Quoted(quote)+" ("+copyColumns+") SELECT "+copyColumns+" FROM "+old.Quoted(quote))
		if err != nil {
			return fmt.Errorf("copy rows: %w", err)
		}
		if copied, err = res.RowsAffected(); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "DROP TABLE "+old.Quoted(quote))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("migrate %s to partitioned: %w", s.Table(), err)
	}
	return copied, nil
}

const copyColumns = "event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, attempts, " +
	"available_at, created_at, done_at, last_error, locked_by, locked_at, seq"
