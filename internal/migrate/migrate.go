// Package migrate moves documents into and out of a store directly, without
// a server: Publish publishes a directory (a required root document first,
// everything checked before anything is written, never overwriting), and
// Export writes every head of a store as a directory Publish accepts. The
// directory layout:
//
//	root.json                 the root document, published as the root scope
//	scopes/<scope>.json|.yaml one document per scope
//	history.jsonl             an export's every event (optional; Publish ignores it)
//	report.json               {"files": {"<relative path>": "sha256:<64 hex>"},
//	                           "schemas": {"<relative path>": {"schemaId": …, "schemaVersion": …}},
//	                           "chain": {…}}
//
// report.json records the SHA-256 of each file's bytes; "schemas" is
// optional and names the schema a document is validated against and
// published with; "chain", written by Export, describes history.jsonl
// (ExportChain) so that VerifyExport can check an export without its
// store. The varplane migrate commands are thin wrappers.
//
// Concurrency: the functions may run while servers use the store; every
// publish is guarded by the generation the checks read, so a document
// published meanwhile stops the run rather than being overwritten.
package migrate

import (
	"fmt"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/canonical"
)

// The fixed names of a migration directory.
const (
	RootFile    = "root.json"
	ReportFile  = "report.json"
	ScopesDir   = "scopes"
	HistoryFile = "history.jsonl"
)

// DefaultRoot is the scope root.json is published as when none is named.
const DefaultRoot varplane.Scope = "root"

// Manifest is report.json.
type Manifest struct {
	Files   map[string]string      `json:"files"`
	Schemas map[string]SchemaNames `json:"schemas,omitempty"`
	Chain   *ExportChain           `json:"chain,omitempty"`
}

// SchemaNames are the schema a document is validated against and published
// with.
type SchemaNames struct {
	SchemaID      string `json:"schemaId"`
	SchemaVersion string `json:"schemaVersion,omitempty"`
}

// Document is one document of a run, as the run's report lists it.
type Document struct {
	Path       string              `json:"path"`
	Scope      varplane.Scope      `json:"scope"`
	Status     string              `json:"status"` // published, skipped or exported
	Generation varplane.Generation `json:"generation,omitempty"`
	Revision   varplane.Revision   `json:"revision"`
}

// The statuses of a Document.
const (
	StatusPublished = "published"
	StatusSkipped   = "skipped"
	StatusExported  = "exported"
)

// Report is what a run did, in the order it did it.
type Report struct {
	Documents []Document `json:"documents"`
	Published int        `json:"published"`
	Skipped   int        `json:"skipped"`
	Exported  int        `json:"exported"`
	// Chain is what an export wrote of the store's history: its chain
	// heads and their digest, the value to anchor it by.
	Chain *ExportChain `json:"chain,omitempty"`
}

func (r *Report) add(d Document) {
	r.Documents = append(r.Documents, d)
	switch d.Status {
	case StatusPublished:
		r.Published++
	case StatusSkipped:
		r.Skipped++
	case StatusExported:
		r.Exported++
	}
}

// RejectedError is data refused before anything was written: every problem
// found, one a line, each naming its file.
type RejectedError struct {
	Problems []string
}

// Error lists the problems.
func (e *RejectedError) Error() string {
	return fmt.Sprintf("rejected, nothing written (%d problem(s)):\n  %s", len(e.Problems), strings.Join(e.Problems, "\n  "))
}

// problems collects the problems of a check phase.
type problems []string

func (p *problems) addf(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return &RejectedError{Problems: p}
}

// fileDigest is the report's digest of a file's bytes: "sha256:" and 64
// lowercase hex digits, the form of a revision (of the bytes as they are).
func fileDigest(b []byte) string { return canonical.DigestCanonical(b) }
