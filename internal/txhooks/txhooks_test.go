package txhooks

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

func TestFinishRunsTheOutcomesCallbacksOnceInOrder(t *testing.T) {
	for _, committed := range []bool{true, false} {
		var logs strings.Builder
		h := Hooks{Log: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Prefix: "test"}
		var ran []string
		h.AfterCommit(func(context.Context) { ran = append(ran, "commit-1") })
		h.AfterRollback(func(context.Context) { ran = append(ran, "rollback-1") })
		h.AfterCommit(func(context.Context) { panic("boom") })
		h.AfterRollback(func(context.Context) { panic("boom") })
		h.AfterCommit(func(context.Context) { ran = append(ran, "commit-2") })
		h.AfterRollback(func(context.Context) { ran = append(ran, "rollback-2") })
		h.AfterCommit(nil)

		h.Finish(context.Background(), committed)
		h.Finish(context.Background(), !committed) // no effect
		want := []string{"rollback-1", "rollback-2"}
		if committed {
			want = []string{"commit-1", "commit-2"}
		}
		if !slices.Equal(ran, want) {
			t.Errorf("committed=%v: ran %v, want %v", committed, ran, want)
		}
		if !h.Ended() || (h.State() == Committed) != committed {
			t.Errorf("committed=%v: state %v", committed, h.State())
		}
		h.AfterCommit(func(context.Context) { ran = append(ran, "late") })
		h.Finish(context.Background(), true)
		if slices.Contains(ran, "late") {
			t.Error("a callback registered after the end ran")
		}
		for _, msg := range []string{"test: transaction callback panicked", "test: callback registered on an ended transaction is dropped"} {
			if !strings.Contains(logs.String(), msg) {
				t.Errorf("committed=%v: no log %q in %s", committed, msg, logs.String())
			}
		}
	}
}
