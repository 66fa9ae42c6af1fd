//go:build !race

package httpapi_test

// raceEnabled: see race_test.go.
const raceEnabled = false
