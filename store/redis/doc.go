// Package redis is the Redis store of record for varplane: many server
// replicas and embedded read-only instances share one Redis (or Redis
// Cluster) that holds every head, revision record, history entry and
// idempotency record under one key prefix, with no TTL anywhere.
//
// Writes go through Lua scripts that each touch one Cluster slot (the hash
// tag of the scope's root segment), so a head, its history entry, the
// idempotency record and the invalidation message are one atomic step. Reads
// are served from in-memory snapshots: an invalidation message on the
// prefix's channel makes every instance read the head from Redis and install
// it, and a periodic revalidation pass confirms every installed head with a
// read-only conditional script, so a lost message is caught within one
// interval. A scope Redis holds nothing for is remembered as absent (a
// bounded number of them) and revalidated the same way, so its first commit
// is found even when its message was lost. docs/redis.md describes the key layout, the scripts, the ACL
// users and what happens under each failure.
//
// Concurrency: every method of *Store is safe for concurrent use. State and
// Revision of an installed scope load an atomic pointer and never lock or
// touch the network; installs are serialised by one mutex, and Watch
// listeners are called in commit order per store, outside that mutex, on the
// goroutine that installed the commit (the caller of Append, the invalidation
// reader or the revalidation pass). Values returned are shared immutable
// snapshots: do not mutate them.
package redis
