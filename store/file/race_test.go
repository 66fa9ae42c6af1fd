//go:build race

package file_test

// raceEnabled: the tests run under the race detector.
const raceEnabled = true
