package main

import (
	"context"
	"testing"

	"github.com/outboxkit/outbox/core"
)

// TestPartitions: partitions migrate converts a plain PostgreSQL table
// (after a plan and --yes), list shows its partitions, create makes more,
// and the table works afterwards.
func TestPartitions(t *testing.T) {
	t.Parallel()
	tg := open(t, "postgres")
	e, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("T"), JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.Store.Insert(context.Background(), tg.DB, []core.Envelope{e}, core.InsertOptions{}); err != nil {
		t.Fatal(err)
	}
	mustContain(t, tg.run(t, "partitions", "list").want(t, exitError).stderr, "not partitioned")
	mustContain(t, tg.run(t, "partitions", "migrate").want(t, exitConfirm).stdout, "copying 1 rows")
	mustContain(t, tg.run(t, "partitions", "migrate", "--yes").want(t, exitOK).stdout, "1 rows copied")
	out := tg.run(t, "partitions", "list").want(t, exitOK).stdout
	mustContain(t, out, tg.Table+"_pbefore  ids MINVALUE .. ", tg.Table+"_pother  ids 1 .. MAXVALUE", tg.Table+"_pdefault  DEFAULT")
	mustContain(t, tg.run(t, "partitions", "create", "--ahead", "5").want(t, exitOK).stdout, "created "+tg.Table+"_p")
	mustContain(t, tg.run(t, "partitions", "create", "--ahead", "5").want(t, exitOK).stdout, "up to date")
	mustContain(t, tg.run(t, "stats").want(t, exitOK).stdout, "pending             1")
	mustContain(t, tg.run(t, "partitions", "bogus").want(t, exitUsage).stderr, "unknown subcommand")
}
