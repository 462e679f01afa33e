package core

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
)

// MaxOwnerLen is the size of the locked_by column: the longest lease owner
// token a store accepts.
const MaxOwnerLen = 128

// NewOwner returns a lease owner token unique to this process and call:
// hostname-pid-random, at most MaxOwnerLen bytes. The dispatcher and the
// poller of one process share one token.
func NewOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	if len(host) > 64 {
		host = host[:64]
	}
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
