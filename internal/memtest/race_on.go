//go:build race

package memtest

// Factor scales memory bounds: the race detector's shadow memory roughly doubles what an
// allocation costs.
const Factor = 2
