package file

// SetCompactHook makes every compaction call fn at each of its steps (see
// compactHook); tests kill the process there.
func SetCompactHook(fn func(step string)) { compactHook = fn }

// SetStateParallelMin sets the state section size from which Open decodes
// it in parallel parts, and returns the previous one.
func SetStateParallelMin(n int) int {
	old := stateParallelMin
	stateParallelMin = n
	return old
}
