//go:build race

package httpapi_test

// raceEnabled: the tests run under the race detector.
const raceEnabled = true
