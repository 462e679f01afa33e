package position

import "context"

// Cycle runs one round of the reader, as its goroutine does.
func (r *Reader) Cycle(ctx context.Context) (bool, error) { return r.cycle(ctx) }

// State returns the state the reader would persist now.
func (r *Reader) State() State { return r.t.state() }
