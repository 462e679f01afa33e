package outbox

// Exported for the tests of package outbox_test.
var (
	DispatchSet = dispatchSet
	PollerSet   = pollerSet
)
