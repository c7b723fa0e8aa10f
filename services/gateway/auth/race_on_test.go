//go:build race

package auth_test

// memFactor scales the memory bounds of the tests: the race detector's shadow memory roughly
// doubles what an allocation costs.
const memFactor = 2
