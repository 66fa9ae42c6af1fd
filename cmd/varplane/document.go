package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// maxDocumentBytes bounds a document read by the CLI: the server refuses
// bodies over its limit anyway; this only keeps a hostile file from
// exhausting the client. YAML is further held to the default document limits
// (yamlDocument).
const maxDocumentBytes = varplane.MaxBodyCeiling

// readDocument reads a document from path ("-" or "" for stdin) and returns
// it as JSON. A .json file must be JSON, a .yaml/.yml file is YAML; anything
// else is JSON when it parses as JSON and YAML otherwise. YAML is converted
// to JSON in document order by yamlDocument; it must be one document.
func readDocument(path string, stdin io.Reader) (json.RawMessage, error) {
	var (
		data []byte
		err  error
		name = path
	)
	if path == "" || path == "-" {
		name = "stdin"
		data, err = io.ReadAll(io.LimitReader(stdin, maxDocumentBytes+1))
	} else {
		var f *os.File
		f, err = os.Open(path)
		if err == nil {
			data, err = io.ReadAll(io.LimitReader(f, maxDocumentBytes+1))
			f.Close()
		}
	}
	if err != nil {
		return nil, usagef("read document: %v", err)
	}
	if len(data) > maxDocumentBytes {
		return nil, usagef("document %s is larger than %d bytes", name, maxDocumentBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, usagef("document %s is empty (give -f FILE or pipe it on stdin)", name)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		if !json.Valid(data) {
			return nil, usagef("document %s is not valid JSON", name)
		}
		return json.RawMessage(data), nil
	case ".yaml", ".yml":
		return yamlDocument(name, data)
	}
	if json.Valid(data) {
		return json.RawMessage(data), nil
	}
	return yamlDocument(name, data)
}

// yamlDocument converts YAML by the project's one converter and policy
// (wire.YAMLToJSON, held to the default document limits): YAML 1.2 core
// schema, so an integer with a leading zero (010) is refused as ambiguous;
// no anchors, aliases or merge keys; scalar keys become their text. Every
// refusal is a usage error naming the line.
func yamlDocument(name string, data []byte) (json.RawMessage, error) {
	out, err := wire.YAMLToJSON(data, varplane.DefaultLimits())
	if err != nil {
		return nil, usagef("document %s: %s", name, varplane.ErrorMessage(err))
	}
	return out, nil
}

// fileFlag registers -f and its long form --file on fs, both setting the
// path of the document ("" or "-" for stdin).
func fileFlag(fs *flag.FlagSet) *string {
	file := fs.String("f", "", "file holding the document (JSON or YAML); stdin when absent or -")
	fs.StringVar(file, "file", "", "same as -f")
	return file
}
