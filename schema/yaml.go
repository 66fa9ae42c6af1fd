package schema

import (
	"encoding/json"
	"errors"

	"github.com/varplane/varplane"
	"github.com/varplane/varplane/internal/wire"
)

// yamlLimits bound a schema file in YAML: the file size bound, and a nesting
// depth deep enough for any real schema. Schema files are operator input,
// but they are read by the one converter with its one policy, as every
// other YAML is.
var yamlLimits = varplane.Limits{MaxBodyBytes: maxSchemaFile, MaxDepth: 256}

// yamlToJSON converts a schema file in YAML to JSON text with wire.YAMLToJSON
// (YAML 1.2 core schema; leading-zero integers, anchors, aliases, merge
// keys, duplicate keys, non-finite numbers, unknown tags and several
// documents refused, each naming the line; numbers keep their digits). The
// error is the converter's message, which never quotes a value.
func yamlToJSON(data []byte) (json.RawMessage, error) {
	doc, err := wire.YAMLToJSON(data, yamlLimits)
	if err != nil {
		return nil, errors.New(varplane.ErrorMessage(err))
	}
	return doc, nil
}
