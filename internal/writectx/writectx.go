// Package writectx marks the context of the statement with which a
// core.Writer inserts events that need nothing back from the INSERT, so
// that a transaction able to send a statement later, with the next one
// (pgxtx with Config.SendWritesWithCommit), knows which statements it may
// hold back. Nothing else may be held: a statement whose result its caller
// reads must run when it is called.
//
// The Writer marks a write only when its transaction says, through Holds,
// that it may hold it, so that no other write pays for the mark.
package writectx

import "context"

type key struct{}

// Mark returns ctx marked.
func Mark(ctx context.Context) context.Context { return context.WithValue(ctx, key{}, true) }

// Marked reports whether ctx was marked.
func Marked(ctx context.Context) bool {
	v, _ := ctx.Value(key{}).(bool)
	return v
}

// holds is the predicate of the one package whose transactions hold
// writes, set by its init (before any write).
var holds func(tx any) bool

// HoldsWith sets what Holds asks; called once, from an init function.
func HoldsWith(f func(tx any) bool) { holds = f }

// Holds reports whether tx may hold a marked write.
func Holds(tx any) bool { return holds != nil && holds(tx) }
