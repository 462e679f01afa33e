package store_test

import "flag"

// go test ./store/... -update rewrites the golden SQL files of the dialect
// packages; every test binary of store/... must accept the flag.
var _ = flag.Bool("update", false, "no golden files in this package")
