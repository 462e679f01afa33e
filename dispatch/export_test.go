package dispatch

// SetYield replaces what the writer hook runs after queuing events
// (runtime.Gosched unless Config.NoYieldAfterCommit); nil when it runs nothing.
func SetYield(d *Dispatcher, f func()) (had bool) {
	had = d.yield != nil
	if had {
		d.yield = f
	}
	return had
}
