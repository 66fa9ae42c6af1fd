// Package layers holds the test of varplane's import rule: the layers of
// docs/architecture.md ("Layers"), checked against `go list -deps -json`
// of every package of the module. It has no code of its own.
package layers
