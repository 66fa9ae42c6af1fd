package schema_test

import (
	"encoding/json"
	"fmt"

	"github.com/varplane/varplane/schema"
)

func ExampleRegistry_Validate() {
	r := schema.NewRegistry()
	err := r.Add("agentic-lanes/v1", json.RawMessage(`{
		"type": "object",
		"additionalProperties": false,
		"properties": {"enabled": {"type": "boolean"}, "token": {"type": "integer"}}
	}`))
	if err != nil {
		panic(err)
	}
	issues, err := r.Validate("agentic-lanes/v1", json.RawMessage(`{"enabled": true, "budgets2": {}, "token": "hunter2"}`))
	if err != nil {
		panic(err)
	}
	for _, is := range issues {
		fmt.Printf("%s %s: %s\n", is.Code, is.Path, is.Message)
	}
	// Output:
	// document.unknown-field /budgets2: unknown field 'budgets2'
	// document.type /token: field 'token' must be integer, not string
}
