module github.com/outboxkit/outbox/broker/kafka

go 1.25.0

require github.com/outboxkit/outbox v0.1.0

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/oklog/ulid/v2 v2.1.2 // indirect
	github.com/pierrec/lz4/v4 v4.1.26 // indirect
	github.com/twmb/franz-go v1.21.7
	github.com/twmb/franz-go/pkg/kmsg v1.13.1 // indirect
)
