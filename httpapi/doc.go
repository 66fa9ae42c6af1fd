// Package httpapi serves varplane's HTTP API: the var route table (reads with
// ETag/304, batch reads, the admin routes for revisions, validation,
// activation, deactivation, rollback, status, history and replay), the
// authorization hook, request limits, the mapping of error codes to HTTP
// statuses, health and readiness probes, Prometheus metrics and structured
// request logs. It also provides Server, a net/http server with sane timeouts
// and graceful shutdown.
//
// A Handler is a thin shell over one *varplane.Engine: it decodes and bounds
// the request, authorizes it, calls the engine and encodes the answer. Several
// Handlers (planes, each with its own base path) may share one Engine, which
// is how HTTP mutations reach the subscribers of other transports.
//
// Concurrency contract: a Handler is safe for concurrent use by any number of
// requests once built; its Options must not be changed after NewHandler. The
// read path serves the byte slice the head precomputed at commit time and does
// not copy it. Server's methods are safe to call from several goroutines;
// Open must be called once, before Close.
package httpapi
