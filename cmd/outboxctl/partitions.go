package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/postgres"
)

// partitionFlags adds --interval and --ahead, which must match the
// postgres.Partitions of the services sharing the table.
func partitionFlags(fs *flags) (interval *durationValue, ahead *int) {
	interval = &durationValue{d: postgres.DefaultPartitionInterval}
	fs.Var(interval, "interval", "the span of one partition, as the services' postgres.Partitions.Interval")
	ahead = fs.Int("ahead", postgres.DefaultPartitionsAhead, "partitions to make after the current one")
	return interval, ahead
}

// durationValue is a flag.Value of a duration that takes days too.
type durationValue struct{ d time.Duration }

func (v *durationValue) String() string { return v.d.String() }
func (v *durationValue) Set(s string) error {
	d, err := parseDuration(s)
	if err != nil {
		return err
	}
	v.d = d
	return nil
}

// partitionedStore returns the partitioned store of --table on a
// PostgreSQL session.
func (a *app) partitionedStore(s *session, interval time.Duration, ahead int) (*postgres.Store, error) {
	if s.dialect != dialectPostgres {
		return nil, usagef("partitions: only PostgreSQL tables are partitioned (the DSN names %s)", s.dialect)
	}
	st, err := postgres.New(postgres.Config{Table: a.g.table, Partitions: &postgres.Partitions{Interval: interval, Ahead: ahead}})
	if err != nil {
		return nil, &usageError{msg: err.Error()}
	}
	return st, nil
}

func (a *app) partitions(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("partitions: give a subcommand: list, create or migrate")
	}
	name := "partitions " + args[0]
	if _, ok := commandHelp[name]; !ok {
		return usagef("partitions: unknown subcommand %q (want list, create or migrate)", args[0])
	}
	fs := a.command(name)
	interval, ahead := partitionFlags(fs)
	var yes, dryRun *bool
	if args[0] == "migrate" {
		yes, dryRun = confirmFlags(fs)
	}
	if err := fs.parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("%s: unexpected argument %q", name, fs.Arg(0))
	}
	ctx, s, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := a.partitionedStore(s, interval.d, *ahead)
	if err != nil {
		return err
	}
	switch args[0] {
	case "list":
		parts, err := st.ListPartitions(ctx, s.db)
		if err != nil {
			return err
		}
		for _, p := range parts {
			switch {
			case p.Default:
				fmt.Fprintf(a.stdout, "%s  DEFAULT\n", p.Name)
			case p.Timed():
				fmt.Fprintf(a.stdout, "%s  %s .. %s\n", p.Name, p.Start.Format(textTime), p.End.Format(textTime))
			default:
				fmt.Fprintf(a.stdout, "%s  ids %s .. %s\n", p.Name, orBound(p.From, "MINVALUE"), orBound(p.To, "MAXVALUE"))
			}
		}
		return nil
	case "create":
		created, _, err := st.MaintainPartitions(ctx, s.db, a.now(), core.PurgeParams{})
		for _, name := range created {
			fmt.Fprintf(a.stdout, "created %s\n", name)
		}
		if err == nil && len(created) == 0 {
			fmt.Fprintln(a.stdout, "up to date")
		}
		return err
	}
	// migrate
	var rows int64
	if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM "+quoteTable(st.Table())).Scan(&rows); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "would convert %s into a table partitioned by event_id (%s partitions, %d ahead), copying %d rows; "+
		"writers and pollers wait for the copy\n", st.Table(), interval.d, *ahead, rows)
	if ok, err := a.confirmed(*yes, *dryRun); !ok || err != nil {
		return err
	}
	copied, err := st.MigrateToPartitioned(ctx, s.db)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "converted %s: %d rows copied\n", st.Table(), copied)
	return nil
}

func orBound(b, none string) string {
	if b == "" {
		return none
	}
	return b
}

// quoteTable quotes a validated, optionally schema-qualified PostgreSQL
// table name.
func quoteTable(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = `"` + p + `"`
	}
	return strings.Join(parts, ".")
}
