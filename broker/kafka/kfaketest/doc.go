// Package kfaketest holds the tests of the Kafka publisher (package
// github.com/outboxkit/outbox/broker/kafka) against franz-go's in-process
// kfake cluster. It has no code of its own.
package kfaketest
