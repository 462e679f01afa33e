package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
)

// base holds what every contender on database/sql has: the server, a pool
// for the writers and the business table.
type base struct {
	srv   *server
	db    *sql.DB
	biz   string
	bizQ  string
	extra []string // more tables to drop
}

func (b *base) setupBase(ctx context.Context, srv *server, conns int) error {
	b.srv = srv
	db, err := srv.open(conns)
	if err != nil {
		return err
	}
	b.db = db
	b.biz = uniqueName("biz")
	b.bizQ = srv.rebind(bizInsert(b.biz))
	if _, err := db.ExecContext(ctx, srv.bizDDL(b.biz)); err != nil {
		return fmt.Errorf("create business table: %w", err)
	}
	return nil
}

func (b *base) teardownBase(ctx context.Context) {
	if b.db == nil {
		return
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for _, t := range append([]string{b.biz}, b.extra...) {
		if _, err := b.db.ExecContext(c, "DROP TABLE IF EXISTS "+t); err != nil {
			fmt.Printf("    drop %s: %v\n", t, err)
		}
	}
	_ = b.db.Close()
}

// inTx runs fn in a transaction and notes transaction i's commit.
func (b *base) inTx(ctx context.Context, i int, rec *recorder, fn func(tx *sql.Tx) error) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, b.bizQ, bizArgs(i)...); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	rec.commit(i)
	return nil
}

// bizOnly is the business transaction alone: the ceiling of W1.
type bizOnly struct{ base }

func (b *bizOnly) setup(ctx context.Context, srv *server, writers int) error {
	return b.setupBase(ctx, srv, writers)
}
func (b *bizOnly) write(ctx context.Context, i int, rec *recorder) error {
	return b.inTx(ctx, i, rec, func(*sql.Tx) error { return nil })
}
func (b *bizOnly) fill(context.Context, int) error        { return nil }
func (b *bizOnly) start(context.Context, *recorder) error { return nil }
func (b *bizOnly) stop(context.Context) error             { return nil }
func (b *bizOnly) teardown(ctx context.Context)           { b.teardownBase(ctx) }

// handSQL is the outbox a team writes by hand: a table with an identity
// key and a status, a partial (PostgreSQL) or composite (MariaDB) index on
// the pending rows, and consumers that each, in one READ COMMITTED
// transaction, lock the next claim rows in key order with FOR UPDATE SKIP
// LOCKED, mark them done with one UPDATE, deliver them and commit; a
// deadlock retries the claim, an empty claim waits poll.
type handSQL struct {
	base
	consumers, claim int
	poll             time.Duration
	table            string
	ins              string
	cdb              *sql.DB
	quit             chan struct{}
	wg               sync.WaitGroup
	errMu            sync.Mutex
	err              error
}

func (h *handSQL) setup(ctx context.Context, srv *server, writers int) error {
	if err := h.setupBase(ctx, srv, writers); err != nil {
		return err
	}
	h.table = uniqueName("hand")
	h.extra = append(h.extra, h.table)
	ddl := []string{"CREATE TABLE " + h.table + " (id BIGSERIAL PRIMARY KEY, event_id VARCHAR(26) NOT NULL, payload TEXT NOT NULL, " +
		"status SMALLINT NOT NULL DEFAULT 0, created_at TIMESTAMPTZ NOT NULL DEFAULT now())",
		"CREATE INDEX " + h.table + "_pending ON " + h.table + " (id) WHERE status = 0"}
	if !srv.pg() {
		ddl = []string{"CREATE TABLE " + h.table + " (id BIGINT AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(26) NOT NULL, payload TEXT NOT NULL, " +
			"status TINYINT NOT NULL DEFAULT 0, created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), " +
			"INDEX " + h.table + "_pending (status, id)) ENGINE = InnoDB"}
	}
	for _, q := range ddl {
		if _, err := h.db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create hand-written outbox: %w", err)
		}
	}
	h.ins = srv.rebind("INSERT INTO " + h.table + " (event_id, payload) VALUES (?, ?)")
	return nil
}

func (h *handSQL) write(ctx context.Context, i int, rec *recorder) error {
	return h.inTx(ctx, i, rec, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, h.ins, eventID(i), payload(i))
		return err
	})
}

func (h *handSQL) fill(ctx context.Context, n int) error {
	const chunk = 500
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		var q strings.Builder
		q.WriteString("INSERT INTO " + h.table + " (event_id, payload) VALUES ")
		args := make([]any, 0, 2*(hi-lo))
		for i := lo; i < hi; i++ {
			if i > lo {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?)")
			args = append(args, eventID(i), payload(i))
		}
		if _, err := h.db.ExecContext(ctx, h.srv.rebind(q.String()), args...); err != nil {
			return err
		}
	}
	return nil
}

func (h *handSQL) start(ctx context.Context, rec *recorder) error {
	db, err := h.srv.open(h.consumers)
	if err != nil {
		return err
	}
	h.cdb, h.quit = db, make(chan struct{})
	claim := h.srv.rebind(fmt.Sprintf("SELECT id, event_id, payload FROM %s WHERE status = 0 ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED", h.table, h.claim))
	for range h.consumers {
		h.wg.Go(func() {
			for {
				n, err := h.consumeOnce(ctx, claim, rec)
				if err != nil && ctx.Err() == nil {
					h.errMu.Lock()
					h.err = err
					h.errMu.Unlock()
				}
				if n > 0 {
					select {
					case <-h.quit:
						return
					default:
					}
					continue
				}
				t := time.NewTimer(h.poll)
				select {
				case <-h.quit:
					t.Stop()
					return
				case <-t.C:
				}
			}
		})
	}
	return nil
}

// consumeOnce claims, delivers and marks done one batch; it returns its size.
func (h *handSQL) consumeOnce(ctx context.Context, claim string, rec *recorder) (int, error) {
	// READ COMMITTED: under InnoDB's REPEATABLE READ the locking read also
	// takes gap locks, and consumers marking neighbouring rows done then
	// deadlock each other; a hand-written MariaDB outbox learns to claim
	// at READ COMMITTED.
	tx, err := h.cdb.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, claim)
	if err != nil {
		if isDeadlock(err) {
			return 0, nil
		}
		return 0, err
	}
	var ids []any
	var nos []int
	for rows.Next() {
		var id int64
		var evID string
		var p []byte
		if err := rows.Scan(&id, &evID, &p); err != nil {
			rows.Close()
			return 0, err
		}
		n, _ := eventNo(evID)
		ids, nos = append(ids, id), append(nos, n)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, tx.Commit()
	}
	// Mark first, deliver, then commit: a deadlock (InnoDB picks one of two
	// consumers whose claims touch neighbouring index records) is reported
	// by the UPDATE, before anything was delivered, and the loop retries.
	q := "UPDATE " + h.table + " SET status = 1 WHERE id IN (?" + strings.Repeat(", ?", len(ids)-1) + ")"
	if _, err := tx.ExecContext(ctx, h.srv.rebind(q), ids...); err != nil {
		if isDeadlock(err) {
			return 0, nil
		}
		return 0, err
	}
	for _, n := range nos {
		rec.deliver(n)
	}
	return len(ids), tx.Commit()
}

func (h *handSQL) stop(context.Context) error {
	if h.quit == nil {
		return nil
	}
	close(h.quit)
	h.wg.Wait()
	h.quit = nil
	_ = h.cdb.Close()
	h.errMu.Lock()
	defer h.errMu.Unlock()
	return h.err
}

func (h *handSQL) teardown(ctx context.Context) { h.teardownBase(ctx) }

// isDeadlock reports InnoDB's deadlock error (1213), which a hand-written
// loop answers by retrying its claim.
func isDeadlock(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}
