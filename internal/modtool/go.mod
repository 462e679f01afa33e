// The tool that keeps the repository's modules releasable (make
// consumer-test, tidy, release): a module of its own so that
// golang.org/x/mod stays out of the root module's requirements. Not
// published.
module github.com/outboxkit/outbox/internal/modtool

go 1.25.0

require golang.org/x/mod v0.40.0
