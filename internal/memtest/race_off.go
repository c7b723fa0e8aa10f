//go:build !race

package memtest

// Factor scales memory bounds: 1 without the race detector (see race_on.go).
const Factor = 1
