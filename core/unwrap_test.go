package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// plainStore is a core.Store with no optional capability; its methods are
// never called.
type plainStore struct{ core.Store }

// batchStore adds core.BatchMarker.
type batchStore struct{ plainStore }

func (batchStore) MarkDoneBatch(context.Context, core.DBTX, string, []string, time.Time) (int64, error) {
	return 0, nil
}

// wrapper wraps a store without declaring any capability itself.
type wrapper struct{ core.Store }

func (w wrapper) Unwrap() core.Store { return w.Store }

// selfWrapper unwraps to itself, as a buggy wrapper might.
type selfWrapper struct{ core.Store }

func (w *selfWrapper) Unwrap() core.Store { return w }

func TestStoreAs(t *testing.T) {
	inner := batchStore{}
	tests := []struct {
		name  string
		store core.Store
		want  bool
	}{
		{"nil", nil, false},
		{"direct", inner, true},
		{"no capability", plainStore{}, false},
		{"embedded without Unwrap hides it", plainStore{inner}, false},
		{"one wrapper", wrapper{inner}, true},
		{"two wrappers", wrapper{wrapper{inner}}, true},
		{"wrapper of a store without it", wrapper{plainStore{}}, false},
		{"wrapper of nil", wrapper{}, false},
		{"self-referencing wrapper ends", &selfWrapper{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bm, ok := core.StoreAs[core.BatchMarker](tc.store)
			if ok != tc.want {
				t.Fatalf("StoreAs = %v, want %v", ok, tc.want)
			}
			if ok {
				if _, isInner := bm.(batchStore); !isInner {
					t.Errorf("StoreAs returned %T, want the inner batchStore", bm)
				}
			}
		})
	}
}

// TestStoreAsFindsOuterFirst: a wrapper that implements the capability
// itself is found before the store it wraps, so that it can observe the
// calls.
func TestStoreAsFindsOuterFirst(t *testing.T) {
	outer := wrapper{batchStore{}}
	type outerBatch struct {
		wrapper
		core.BatchMarker
	}
	s := outerBatch{outer, batchStore{}}
	bm, ok := core.StoreAs[core.BatchMarker](s)
	if !ok {
		t.Fatal("not found")
	}
	if _, isOuter := bm.(outerBatch); !isOuter {
		t.Errorf("StoreAs returned %T, want the outer store", bm)
	}
}
