// Package storegen writes the methods each dialect's Store delegates to the
// shared SQL store (store/internal/sqlstore), so that every method of
// postgres.Store, mysql.Store and sqlite.Store is explicit and documented in
// go doc while the delegation is written once, here. The dialect packages
// run it through go generate (cmd/storegen); a test checks that the
// generated files are up to date.
package storegen

import (
	"bytes"
	"fmt"
	"go/format"
	"slices"
	"strings"
)

// Method is one delegated method of a dialect Store.
type Method struct {
	Name   string
	Params string // the parameter list, without parentheses
	Args   string // the arguments passed on
	Result string // the result list, with parentheses when there are several
	Doc    string // the doc comment's text after "Name ", one sentence per line
}

// Methods are the delegated methods, in the order go doc should show them:
// schema, the core.Store write path, the optional capabilities, dead events,
// purge and inspection.
var Methods = []Method{
	{"Table", "", "", "string",
		"returns the table this store works on, schema-qualified when it has a\nschema."},
	{"KeyTable", "", "", "string",
		"returns the table of the per-key counters of ordered delivery,\nschema-qualified when it has a schema: the table's name with \"_key\"\nappended (shortened with a hash beyond 63 bytes)."},
	{"SchemaSQL", "", "", "string",
		"returns the DDL that creates the table and its indexes, for migration tools.\nRunning it twice is harmless."},
	{"UpgradeOrderingSQL", "", "", "string",
		"returns the statements that add ordered delivery (the seq column, its\nindex and the key table) to a table created by an earlier release, for\nmigration tools."},
	{"CreateSchema", "ctx context.Context, db core.DBTX", "ctx, db", "error",
		"creates the table and its indexes if they do not exist, and adds ordered\ndelivery to a table of an earlier release that lacks it. Running it again\nis harmless."},
	{"Insert", "ctx context.Context, db core.DBTX, envs []core.Envelope, opts core.InsertOptions", "ctx, db, envs, opts", "error",
		"validates envs and writes them as NEW rows in multi-row statements. A\nbatch too large for one statement is still written atomically: in a\ntransaction of its own when db is a pool, under a savepoint when db is the\ncaller's transaction. A duplicate event id returns an error matching\ncore.ErrDuplicateEvent. It implements core.Store."},
	{"InsertOrdered", "ctx context.Context, db core.DBTX, envs []core.Envelope, opts core.InsertOptions", "ctx, db, envs, opts", "(core.InsertResult, error)",
		"is Insert that also takes the sequence numbers of the ordered envelopes\n(see core.Ordering) and returns them, with the ids of those it stored WAITING. An\nordered envelope without an aggregate id returns an error matching\ncore.ErrInvalid, and nothing is written. It implements core.OrderedStore."},
	{"Claim", "ctx context.Context, db core.DBTX, p core.ClaimParams", "ctx, db, p", "(events []core.Event, bad []core.RowError, err error)",
		"leases up to p.Limit deliverable rows for p.Owner in (created_at,\nevent_id) order and returns them; rows that cannot be decoded come back in\nbad. It implements core.Store."},
	{"Release", "ctx context.Context, db core.DBTX, owner string, ids []string", "ctx, db, owner, ids", "(int64, error)",
		"drops owner's lease on ids without counting an attempt and returns how\nmany rows it released. It implements core.Store."},
	{"MarkDone", "ctx context.Context, db core.DBTX, owner, id string, now time.Time", "ctx, db, owner, id, now", "(bool, error)",
		"records the delivery of id if owner still leases it. It implements\ncore.Store."},
	{"MarkRetry", "ctx context.Context, db core.DBTX, owner, id string, next time.Time, lastErr string", "ctx, db, owner, id, next, lastErr", "(bool, error)",
		"records a failed attempt of id (attempts+1, RETRY, next attempt at next)\nif owner still leases it. It implements core.Store."},
	{"MarkDead", "ctx context.Context, db core.DBTX, owner, id string, now time.Time, lastErr string", "ctx, db, owner, id, now, lastErr", "(bool, error)",
		"records the final failure of id (attempts+1, DEAD) if owner still leases\nit. It implements core.Store."},
	{"Get", "ctx context.Context, db core.DBTX, id string", "ctx, db, id", "(core.Event, error)",
		"returns the event id whatever its status, or an error matching\ncore.ErrNotFound (and sql.ErrNoRows) when it does not exist. It implements\ncore.Store."},
	{"MarkDoneBatch", "ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time", "ctx, db, owner, ids, now", "(int64, error)",
		"records the delivery of the ids owner still leases and returns how many\nrows it changed. It implements core.BatchMarker."},
	{"DeleteDoneBatch", "ctx context.Context, db core.DBTX, owner string, ids []string", "ctx, db, owner, ids", "(int64, error)",
		"deletes the rows of the delivered ids owner still leases and returns how\nmany it deleted. It implements core.DoneDeleter."},
	{"RenewLeases", "ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time", "ctx, db, owner, ids, now", "([]string, error)",
		"extends to now the leases owner still holds on ids and returns the ids\nwhose lease is gone. It implements core.LeaseRenewer."},
	{"Ordering", "", "", "core.Ordering",
		"returns the aggregate types this store delivers in order per key; nil\nwhen none. It implements core.OrderedStore."},
	{"MarkDoneOrdered", "ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time", "ctx, db, owner, ids, now", "(int64, []core.Event, error)",
		"records the delivery of the ids owner still leases and, in the same\ntransaction, promotes the next event of each ordered one's key, leased by\nowner; it returns how many rows it marked DONE and the promoted events. It\nimplements core.OrderedStore."},
	{"MarkDoneOrderedNoWait", "ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time", "ctx, db, owner, ids, now", "(int64, []core.Event, []string, error)",
		"is MarkDoneOrdered for the ids whose key rows no other transaction holds\nand for the unordered ones, and returns the ids of the other ordered rows,\nuntouched, for a later MarkDoneOrdered. It implements\ncore.OrderedNoWaitMarker."},
	{"MarkDeadOrdered", "ctx context.Context, db core.DBTX, owner, id string, now time.Time, lastErr string", "ctx, db, owner, id, now, lastErr", "(bool, []core.Event, error)",
		"records the final failure of id if owner still leases it and, when its\naggregate type's policy is core.DeadContinues, promotes the next event of\nits key, leased by owner. It implements core.OrderedStore."},
	{"BlockedKeys", "ctx context.Context, db core.DBTX, f core.DeadFilter", "ctx, db, f", "([]core.BlockedKey, error)",
		"lists the keys held up by a DEAD head, oldest first. It implements\ncore.OrderedStore."},
	{"SkipDead", "ctx context.Context, db core.DBTX, ids []string, now time.Time", "ctx, db, ids, now", "(int64, error)",
		"moves the keys of the DEAD ordered heads ids past them without delivering\nthem and returns how many keys it moved; the events stay DEAD. It\nimplements core.OrderedStore."},
	{"QueryDead", "ctx context.Context, db core.DBTX, f core.DeadFilter", "ctx, db, f", "([]core.Event, error)",
		"returns the DEAD events matching f, oldest first. It implements\ncore.DeadStore."},
	{"CountDead", "ctx context.Context, db core.DBTX, f core.DeadFilter", "ctx, db, f", "(int64, error)",
		"counts the DEAD events matching f. It implements core.DeadStore."},
	{"ReplayDead", "ctx context.Context, db core.DBTX, ids []string, now time.Time", "ctx, db, ids, now", "(int64, error)",
		"moves the DEAD events ids back to NEW and returns how many it moved. It\nimplements core.DeadStore."},
	{"ReplayDeadBatch", "ctx context.Context, db core.DBTX, f core.DeadFilter, limit int, now time.Time", "ctx, db, f, limit, now", "(int64, error)",
		"replays up to limit DEAD events matching f, oldest first, and returns how\nmany it moved. It implements core.DeadStore."},
	{"Purge", "ctx context.Context, db core.DBTX, p core.PurgeParams", "ctx, db, p", "(int64, error)",
		"deletes up to p.Limit terminal rows selected by p, oldest first, in one\nstatement, and returns how many it deleted. It implements core.Purger."},
	{"PurgeKeys", "ctx context.Context, db core.DBTX, before time.Time, limit int", "ctx, db, before, limit", "(int64, error)",
		"deletes up to limit rows of the key table of ordered delivery whose keys\nhave no event left (all finished, and their rows purged) and were last\nwritten or finished before before, and returns how many it deleted. A\nwriter of such a key concurrently is safe. It implements purge.KeyPurger."},
	{"Stats", "ctx context.Context, db core.DBTX", "ctx, db", "(core.Stats, error)",
		"counts the rows by state and finds the oldest pending one. It implements\ncore.Inspector."},
	{"CountPurgeable", "ctx context.Context, db core.DBTX, p core.PurgeParams", "ctx, db, p", "(done, dead int64, err error)",
		"counts the DONE and DEAD rows a Purge with p would delete, ignoring\np.Limit. It implements core.Inspector."},
	{"CountByType", "ctx context.Context, db core.DBTX", "ctx, db", "([]core.TypeCount, error)",
		"counts the NEW, RETRY and DEAD rows of each (aggregate type, event\ntype), ordered by aggregate type and event type. It implements\ncore.Inspector."},
}

// Capabilities are the interfaces every dialect Store implements; the
// generated file asserts them at compile time.
var Capabilities = []string{"core.Store", "core.BatchMarker", "core.DoneDeleter", "core.LeaseRenewer", "core.Inspector", "core.OrderedStore"}

// LockMethods are the methods of core.Locker, generated for the dialects
// whose database has named locks (Dialect.Locks).
var LockMethods = []Method{
	{"TryLock", "ctx context.Context, db core.Conner, name string", "ctx, db, name", "(core.Lock, bool, error)",
		"tries once, without waiting, to take the lock name of this store's table\non a dedicated connection of db, and returns it held, or false when\nanother session holds it. It implements core.Locker."},
}

// Generate returns the source of the delegating methods of d's package,
// whose Store keeps the shared store in its field shared. The methods named
// in d.Skip are left out: the dialect writes them itself.
func Generate(d Dialect) ([]byte, error) {
	pkg, skip := d.Pkg, d.Skip
	caps, methods := Capabilities, Methods
	if d.Locks {
		caps = append(slices.Clip(caps), "core.Locker")
		methods = append(slices.Clip(methods), LockMethods...)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by store/internal/storegen/cmd/storegen; DO NOT EDIT.\n\n")
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	b.WriteString("import (\n\t\"context\"\n\t\"time\"\n\n\t\"github.com/outboxkit/outbox/core\"\n)\n\n")
	b.WriteString("// Every capability the shared SQL store gives this Store.\nvar (\n")
	for _, c := range caps {
		fmt.Fprintf(&b, "\t_ %s = (*Store)(nil)\n", c)
	}
	b.WriteString(")\n")
	for _, m := range methods {
		if slices.Contains(skip, m.Name) {
			continue
		}
		b.WriteString("\n")
		for i, line := range strings.Split(m.Doc, "\n") {
			if i == 0 {
				line = m.Name + " " + line
			}
			b.WriteString("// " + line + "\n")
		}
		fmt.Fprintf(&b, "func (s *Store) %s(%s) %s {\n\treturn s.shared.%s(%s)\n}\n", m.Name, m.Params, m.Result, m.Name, m.Args)
	}
	src, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("storegen: format %s: %w", pkg, err)
	}
	return src, nil
}

// Dialect is one package the generator writes for: a directory of store/
// named after its package.
type Dialect struct {
	Pkg   string   // package name and directory
	Skip  []string // methods the dialect writes itself
	Locks bool     // the database has named locks: the Store implements core.Locker
}

// Dialects are the packages under store/ that delegate to the shared store.
var Dialects = []Dialect{
	{Pkg: "postgres", Locks: true},
	{Pkg: "mysql", Skip: []string{"CreateSchema"}, Locks: true}, // adds an index for one claim strategy
	{Pkg: "sqlite"}, // one process owns the file: no named locks
}

// Lookup returns the dialect of package pkg.
func Lookup(pkg string) (Dialect, bool) {
	for _, d := range Dialects {
		if d.Pkg == pkg {
			return d, true
		}
	}
	return Dialect{}, false
}

// FileName is the generated file in each dialect's directory.
const FileName = "store_gen.go"
