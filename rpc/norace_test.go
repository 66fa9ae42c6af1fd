//go:build !race

package rpc_test

// raceFactor: see race_test.go.
const raceFactor = 1
