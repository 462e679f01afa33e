// Package testbroker gives the broker tests their servers: the URL of the
// shared NATS or RabbitMQ server from the environment, and private
// nats-server processes (one node or a cluster on loopback ports) that a
// test may stop and start. A missing server skips the test with a message
// naming the variable to set, or fails it under OUTBOX_REQUIRE_DBS=1, as
// testdb does for the databases.
//
// Environment:
//
//	OUTBOX_NATS_URL     e.g. nats://127.0.0.1:4222 (JetStream enabled)
//	OUTBOX_AMQP_URL     e.g. amqp://guest:guest@127.0.0.1:5672/
//	OUTBOX_NATS_SERVER  path of the nats-server binary for private servers;
//	                    default: nats-server on PATH, then /usr/sbin/nats-server
package testbroker

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
)

// Environment variables naming the servers, and the values that work on a
// developer machine with local servers (DEVELOPERS.md says how to start them).
const (
	NATSEnv         = "OUTBOX_NATS_URL"
	AMQPEnv         = "OUTBOX_AMQP_URL"
	ExampleNATSURL  = "nats://127.0.0.1:4222"
	ExampleAMQPURL  = "amqp://guest:guest@127.0.0.1:5672/"
	NATSServerEnv   = "OUTBOX_NATS_SERVER"
	requireEnv      = "OUTBOX_REQUIRE_DBS"
	defaultNATSPath = "/usr/sbin/nats-server"
)

// Required reports whether a missing server must fail the test (CI).
func Required() bool { return os.Getenv(requireEnv) == "1" }

// SkipOrFail skips the test, or fails it under OUTBOX_REQUIRE_DBS=1.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// NATSURL returns the shared NATS server's URL, or skips the test.
func NATSURL(t testing.TB) string { return url(t, "NATS JetStream", NATSEnv, ExampleNATSURL) }

// AMQPURL returns the shared RabbitMQ server's URL, or skips the test.
func AMQPURL(t testing.TB) string { return url(t, "RabbitMQ", AMQPEnv, ExampleAMQPURL) }

func url(t testing.TB, name, env, example string) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		SkipOrFail(t, "%s tests: set %s=%s to run", name, env, example)
	}
	return u
}

// UniqueName returns a stream, subject token, queue or exchange name no
// other test or run uses.
func UniqueName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + "_" + hex.EncodeToString(b[:])
}
