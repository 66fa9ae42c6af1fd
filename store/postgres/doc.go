// Package postgres is the PostgreSQL store of record for varplane: many
// server replicas share one database that holds the event log, every
// revision record, the heads and the idempotency records in one schema
// (default "varplane"), with the durability, backups and point-in-time
// recovery of the database.
//
// Every commit is one call of a commit function (created by the embedded
// migrations) and so one transaction: the head row is locked (SELECT … FOR
// UPDATE) and its generation compared with the expected one, the event is
// appended, the head updated and the idempotency key inserted (its primary
// key refuses a reuse). A subtree deactivation chooses and locks its active
// descendants in the same transaction; a publish (AppendPublish) stores a
// revision and activates it in one, locking the head row before it looks
// for the revision. Leases are one conditional statement each on the
// leases table, timed by the database's clock.
//
// Right after a commit the store sends its invalidation with pg_notify, in
// a transaction of its own that commits asynchronously: a NOTIFY inside the
// commit would hold PostgreSQL's cluster-wide notification lock through the
// commit's WAL flush and so serialise every commit (docs/postgres.md has the
// measurement). Reads are served from in-memory snapshots: a notification
// on the schema's channel makes every replica read the named heads and
// install them, and a periodic revalidation pass sends the version of every
// installed head and gets back only those that changed, so a notification
// lost for any reason (a writer that died right after its commit, a
// dropped connection) is caught within one interval. docs/postgres.md
// describes the schema, the roles and what happens under each failure.
//
// Concurrency: every method of *Store is safe for concurrent use. State and
// Revision of an installed scope load an atomic pointer and never lock or
// touch the network; installs and Watch deliveries are serialised by one
// mutex, so listeners see commits one at a time, in install order, on the
// goroutine that installed them (the caller of Append, the notification
// reader or the revalidation pass). Values returned are shared immutable
// snapshots: do not mutate them.
package postgres
