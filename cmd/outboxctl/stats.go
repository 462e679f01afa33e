package main

import (
	"context"
	"time"
)

// stats is what "stats" reports.
type stats struct {
	Table         string     `json:"table"`
	Pending       int64      `json:"pending"`
	Retrying      int64      `json:"retrying"`
	Leased        int64      `json:"leased"`
	Dead          int64      `json:"dead"`
	Done          int64      `json:"done"`
	Waiting       int64      `json:"waiting"`
	BlockedKeys   int64      `json:"blocked_keys"`
	OldestPending *time.Time `json:"oldest_pending_created_at"`
	OldestAge     *float64   `json:"oldest_pending_age_seconds"`
	// Position delivery: STREAM rows above the persisted floor, the
	// largest position minus the floor, the age of the oldest such row.
	Stream          int64    `json:"stream"`
	PositionLag     int64    `json:"position_lag"`
	OldestStreamAge *float64 `json:"oldest_stream_age_seconds"`
}

// readStats asks the store for its counts (core.Inspector).
func readStats(ctx context.Context, s *session, now time.Time) (stats, error) {
	st, err := s.store.Stats(ctx, s.db)
	if err != nil {
		return stats{}, err
	}
	out := stats{Table: s.store.Table(), Pending: st.New, Retrying: st.Retry, Leased: st.Leased, Dead: st.Dead, Done: st.Done,
		Waiting: st.Waiting, BlockedKeys: st.BlockedKeys, Stream: st.Stream, PositionLag: st.PositionLag}
	if !st.OldestStream.IsZero() {
		age := max(now.Sub(st.OldestStream), 0).Seconds()
		out.OldestStreamAge = &age
	}
	if !st.OldestPending.IsZero() {
		oldest := st.OldestPending
		age := max(now.Sub(oldest), 0).Seconds()
		out.OldestPending, out.OldestAge = &oldest, &age
	}
	return out, nil
}
