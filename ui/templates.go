package ui

import (
	"html/template"
	"strings"
	"time"

	"github.com/varplane/varplane"
)

// pageNames are the pages; each is templates/<name>.html with the layout.
var pageNames = []string{"signin", "error", "scopes", "scope", "rollback", "deactivate", "changes", "change", "policies", "schemas", "components", "fleet", "rollouts", "rollout"}

func parsePages(h *Handler) map[string]*template.Template {
	funcs := template.FuncMap{
		"when": func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		},
		// depth is a scope's level in the tree (0 for a group), capped
		// at the deepest indentation the stylesheet has.
		"depth": func(s varplane.Scope) int { return min(strings.Count(string(s), "."), 6) },
		"list":  func(s ...string) []string { return s },
		"iso":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"short": func(r varplane.Revision) string {
			s := strings.TrimPrefix(string(r), "sha256:")
			if len(s) > 12 {
				s = s[:12]
			}
			return s
		},
		"field": func(f *flash, name string) *flash {
			if f != nil && !f.OK && f.Field == name {
				return f
			}
			return nil
		},
	}
	layout := template.Must(template.New("layout").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html"))
	pages := map[string]*template.Template{}
	for _, n := range pageNames {
		pages[n] = template.Must(template.Must(layout.Clone()).ParseFS(templateFS, "templates/"+n+".html"))
	}
	return pages
}
