// Package testsupport groups what the tests, the benchmarks and the
// reliability suite share to run the library against real databases: testdb
// opens fresh outbox tables, testnode wires outbox instances in a test
// process, catalog reads a table's columns and indexes for comparison. Only tests, bench and reliability import it; no package of the
// library does (TestLibraryDoesNotImportTestSupport checks it), so that the
// arrows between the internal packages point one way: test support depends on
// the library, never the reverse.
package testsupport
