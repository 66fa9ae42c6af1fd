//go:build race

package rpc_test

// raceFactor scales the memory bounds of the attack tests under the race
// detector, which makes every goroutine and allocation dearer (its shadow
// memory); the bounds themselves are checked by the run without it.
const raceFactor = 3
