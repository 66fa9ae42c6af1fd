package file

// SetCompactHook makes every compaction call fn at each of its steps (see
// compactHook); tests kill the process there.
func SetCompactHook(fn func(step string)) { compactHook = fn }
