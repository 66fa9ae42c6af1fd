// Package config is varplane's component configuration layer: component
// manifests (a JSON Schema and defaults), the epoch (the hash of the schema),
// per-environment annotations, the deployment declaration, the values
// service (get, fetch, list, create). httpapi serves its HTTP resources and
// package ui its page.
//
// It is built on the core engine. The configuration of a component for an
// epoch lives in the scope "<namespace>.<name>@<epoch>" (see Scope): a create
// is a revision of that scope plus its activation, so the history, audit log
// and push streams of the core apply to configurations unchanged. The values
// service owns those scopes (Owner): given to the engine, it keeps every
// other writer out, so that only what fits the schema is stored. The
// generation of the scope is the object's `created` order, strictly
// increasing per component and epoch; a created event is the view of a
// commit of such a scope (EventsFromCommit).
//
// Every body and file config reads is held to varplane.Limits before a tree
// is built, and YAML is read by the project's one converter
// (wire.YAMLToJSON, see ToJSON).
//
// Secret references ("$NAME") are stored and served as references; package
// config/secret substitutes them in the consuming process, and package
// config/consumer is the Go consumer that follows a component's
// configuration.
//
// Concurrency: Manifest, Deployment and Service values are immutable after
// construction or internally synchronised; every exported method is safe for
// concurrent use.
package config
