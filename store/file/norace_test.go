//go:build !race

package file_test

// raceEnabled: see race_test.go.
const raceEnabled = false
