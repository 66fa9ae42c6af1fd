// Package schema holds the JSON Schemas (draft 2020-12 by default) that
// documents name by schemaId, and turns validation failures into
// varplane.Issue values with stable codes.
//
// A Registry maps schemaIds to compiled schemas and implements
// varplane.Validator. LoadDir fills one from a directory of .json, .yaml and
// .yml files; the schemaId of a file is its path relative to the directory,
// slash-separated, without the extension ("agentic-lanes/v1.yaml" is
// "agentic-lanes/v1"). A schema's own "$id" does not name it: it only sets
// the base URI that the schema's internal references resolve against.
// YAML files are read by the project's one YAML converter, with its one
// policy (YAML 1.2 core schema; no anchors, aliases or merge keys — write a
// shared part once under "$defs" and "$ref" it; no leading-zero integers).
//
// Schemas are self-contained. Every "$ref" or "$schema" that would need a
// resource from outside the schema (a file, a network URL, another schema of
// the registry) makes compilation fail; only the standard meta-schemas,
// which the library embeds, resolve. Formats ("format": "email", …) are
// asserted, not merely annotated.
//
// Issue messages name the offending field and what the schema expects, never
// the rejected value: documents may carry data that must not reach logs or
// API answers.
//
// Concurrency: a *Schema is immutable and safe for concurrent use. A Registry
// is safe for concurrent use: Validate, Lookup and IDs read an immutable
// snapshot without locking, and Add (typically called only while loading)
// publishes a new snapshot.
package schema
