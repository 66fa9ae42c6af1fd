//go:build race

package ui

// raceEnabled: the tests run under the race detector.
const raceEnabled = true
