package sqlstore

import (
	"time"

	"github.com/outboxkit/outbox/core"
)

// Statement is one SQL statement of a Store with sample arguments.
type Statement struct {
	Name string // "claim", "claim-from", "claim-read-back", "dead", "count-dead", "replay-dead", "purge", "promote", "promote-read" or "key-advance"
	SQL  string // in the dialect's bind-marker style
	Args []any
}

// PlanStatements returns the statements of s that must walk an index instead
// of sorting or scanning the table, bound to sample arguments around now:
// the claim (each statement of the dialect's claim strategy that searches for
// rows), the dead-event query, count and batch replay, and the purge. Tests run EXPLAIN on
// them; they are the very strings the store executes.
func PlanStatements(s *Store, now time.Time) []Statement {
	now = now.UTC().Truncate(time.Microsecond)
	var out []Statement
	// The claim from the oldest pending row, and the claim from a point in
	// the backlog (ClaimParams.From), an hour back.
	for _, from := range []time.Time{{}, now.Add(-time.Hour)} {
		p := core.ClaimParams{Owner: "explain", Now: now, LeaseTimeout: time.Minute, Limit: 100, From: from}
		stmts, cand := s.claimStatements(p, now)
		lease := []any{p.Owner, s.ts(now)}
		name := "claim"
		if !from.IsZero() {
			name = "claim-from"
		}
		switch s.d.Claim {
		case ClaimReturning:
			out = append(out, Statement{name, stmts.ret, append(lease, cand...)})
		case ClaimSelectForUpdate:
			out = append(out, Statement{name, stmts.sel, cand})
		case ClaimUpdateThenSelect:
			out = append(out, Statement{name, stmts.upd, append(lease, cand...)})
		}
	}
	if s.d.Claim == ClaimUpdateThenSelect {
		out = append(out, Statement{"claim-read-back", s.claimReadBack, []any{"explain", s.ts(now)}})
	}
	f := core.DeadFilter{EventType: "Tested"}
	q, args := s.queryDead(f)
	out = append(out, Statement{"dead", q, args})
	q, args = s.countDead(core.DeadFilter{})
	out = append(out, Statement{"count-dead", q, args})
	q, args = s.replayDeadBatch(f, 500, now)
	out = append(out, Statement{"replay-dead", s.d.rebind(q), args})
	q, args = s.purge(core.PurgeParams{DoneBefore: now.Add(-24 * time.Hour), DeadBefore: now.Add(-48 * time.Hour), Limit: 500})
	out = append(out, Statement{"purge", s.d.rebind(q), args})
	// Promotion of the next events of a batch's keys: by (key, seq), through
	// the seq index.
	promote, read := s.keys.promoteSQL(2)
	pargs := []any{"explain", s.ts(now), "Order", "K", int64(2), "Order", "L", int64(5)}
	out = append(out, Statement{"promote", promote, pargs})
	if read != "" {
		out = append(out, Statement{"promote-read", read, pargs})
	}
	return out
}

// KeyPlanStatements returns, for a dialect with KeysLimited, the
// statements of a DONE batch that finishes the first event of as many of
// aggIDs (keys of aggType) as one statement names: the key UPDATE
// ("key-advance"), the promotion of the keys' second events ("promote")
// and, with Dialect.LockingReadSkip, the locking read of the key rows that
// passes held ones and joins the keys' second events ("key-lock"),
// bound to sample arguments around now. They must walk their indexes (the
// key table's primary key; the events' seq index, then the key rows) at the
// largest batch, whatever the table's statistics. Other dialects return
// nil.
func KeyPlanStatements(s *Store, aggType string, aggIDs []string, now time.Time) []Statement {
	k, ok := s.keys.(*limitedKeys)
	if !ok {
		return nil
	}
	now = now.UTC().Truncate(time.Microsecond)
	runs := make([]seqRun, 0, keyChunk)
	for _, id := range aggIDs[:min(len(aggIDs), keyChunk)] {
		runs = append(runs, seqRun{orderKey{aggType, id}, 0, 1})
	}
	q, args := k.moveKeysStmt(runs, now)
	pargs := []any{"explain", s.ts(now)}
	for _, r := range runs {
		pargs = append(pargs, r.key.aggType, r.key.aggID, r.to+1)
	}
	promote, _ := k.promoteSQL(len(runs))
	out := []Statement{{"key-advance", q, args}, {"promote", promote, pargs}}
	if s.d.LockingReadSkip != "" {
		lock, largs := k.lockKeysNextSQL(runs)
		out = append(out, Statement{"key-lock", lock, largs})
	}
	return out
}
