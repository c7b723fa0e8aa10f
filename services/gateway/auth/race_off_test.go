//go:build !race

package auth_test

// memFactor scales the memory bounds of the tests (see race_on_test.go).
const memFactor = 1
