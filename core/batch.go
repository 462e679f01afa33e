package core

import (
	"context"
	"time"
)

// BatchMarker is an optional capability of a Store: recording many
// deliveries in one statement. When the store has it, the dispatcher writes
// the DONE outcomes of its workers in batches instead of one statement (and
// one commit) per event, so that marking events done does not double the
// write load of the database.
//
// It is a separate interface, not a method of Store, so that stores (and
// test fakes) without it keep working: the dispatcher then calls MarkDone
// per event. The dispatcher finds it with StoreAs, so that it survives a
// wrapper that implements StoreUnwrapper.
type BatchMarker interface {
	// MarkDoneBatch records the delivery of ids, all leased by owner, with
	// done_at = now, and returns how many rows it changed. It is fenced as
	// MarkDone is: a row no longer leased by owner, or already terminal, is
	// left alone and not counted; an unknown id is skipped. Duplicate ids
	// count once. A store error leaves the rows as they were when the
	// statement failed (a store may split a long list into several
	// statements; those that succeeded stay applied).
	MarkDoneBatch(ctx context.Context, db DBTX, owner string, ids []string, now time.Time) (int64, error)
}

// DoneDeleter is an optional capability of a Store: deleting delivered
// events instead of keeping them as DONE rows. The dispatcher uses it when
// dispatch.Config.DeleteDelivered is set, and requires it then.
type DoneDeleter interface {
	// DeleteDoneBatch deletes the rows of ids, all leased by owner, and
	// returns how many it deleted. It is fenced as MarkDoneBatch is: a row
	// no longer leased by owner, or terminal (DONE or DEAD), is left alone
	// and not counted; an unknown id is skipped. Duplicate ids count once.
	DeleteDoneBatch(ctx context.Context, db DBTX, owner string, ids []string) (int64, error)
}
