package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"time"
)

// w1RawDone is the ceiling of an outbox that records its deliveries: the
// writers of w1Baseline's raw outbox INSERT, and beside them one marker
// that sets the committed rows DONE in batches the way the dispatcher does
// (up to -done-batch ids per UPDATE, gathered for at most -done-linger), on
// the same pool. Events/s run from the first write until the last row is
// DONE. On SQLite, where one connection writes at a time, the DONE writes
// compete with the INSERTs; the outbox's W1 can be compared with this
// instead of with the INSERT alone.
func w1RawDone(ctx context.Context, c *config, tg *target, data *w1Data) (result, error) {
	db, err := tg.open(c.poolSize(1))
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	biz, dropBiz, err := bizTable(ctx, tg, db)
	if err != nil {
		return result{}, err
	}
	defer dropBiz()
	t, err := newTable(ctx, tg, db, "rawdone")
	if err != nil {
		return result{}, err
	}
	defer t.drop(ctx)
	bizInsert := tg.rebind("INSERT INTO " + biz + " (id, customer, amount, created_at) VALUES (?, ?, ?, ?)")
	outboxInsert := rawOutboxInsert(tg, t.st.Table())

	committed := make(chan string, 4*c.doneBatch)
	var (
		markErr error
		wg      sync.WaitGroup
	)
	wg.Go(func() { markErr = markDoneBatches(ctx, c, tg, db, t.st.Table(), committed) })
	cpu0 := tg.cpu()
	start := time.Now()
	_, err = writeAll(ctx, len(data.ids), c.writers, func(_, i int) error {
		if err := rawOrder(ctx, tg, db, data, bizInsert, outboxInsert, i); err != nil {
			return err
		}
		committed <- data.ids[i]
		return nil
	})
	close(committed)
	wg.Wait()
	elapsed := time.Since(start)
	cpu, serverCPU := tg.since(cpu0)
	if err != nil {
		return result{}, err
	}
	if markErr != nil {
		return result{}, fmt.Errorf("mark done: %w", markErr)
	}
	var done int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+t.st.Table()+" WHERE status = 1").Scan(&done); err != nil {
		return result{}, err
	}
	if done != len(data.ids) {
		return result{}, fmt.Errorf("%d rows DONE, want %d", done, len(data.ids))
	}
	return result{Run: "raw INSERT + raw DONE batches", Events: len(data.ids), Seconds: elapsed.Seconds(),
		PerSec: float64(len(data.ids)) / elapsed.Seconds(), CPUSeconds: cpu, ServerCPUSeconds: serverCPU}, nil
}

// markDoneBatches sets the ids it receives DONE, up to c.doneBatch per
// UPDATE, waiting at most c.doneLinger for a batch to fill, until ids is
// closed and drained.
func markDoneBatches(ctx context.Context, c *config, tg *target, db *sql.DB, table string, ids <-chan string) error {
	batch := make([]any, 0, c.doneBatch+1)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		q := "UPDATE " + table + " SET status = 1, done_at = ? WHERE event_id IN (?" + strings.Repeat(", ?", len(batch)-1) + ")"
		_, err := db.ExecContext(ctx, tg.rebind(q), append([]any{tg.encodeTime(time.Now())}, batch...)...)
		batch = batch[:0]
		return err
	}
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		select {
		case id, ok := <-ids:
			if !ok {
				return flush()
			}
			if len(batch) == 0 {
				linger.Reset(c.doneLinger)
			}
			batch = append(batch, id)
			if len(batch) < c.doneBatch {
				continue
			}
		case <-linger.C:
		}
		linger.Stop()
		if err := flush(); err != nil {
			return err
		}
	}
}
