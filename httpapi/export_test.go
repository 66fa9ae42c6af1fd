package httpapi

// RoutePatterns returns the patterns of every route h registered, for the
// tests of the chain (chain_test.go).
func RoutePatterns(h *Handler) []string {
	out := make([]string, 0, len(h.routes))
	for p := range h.routes {
		out = append(out, p)
	}
	return out
}
