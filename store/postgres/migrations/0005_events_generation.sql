-- varplane schema version 5: the events of a generation found by an index,
-- and the read a follower makes of another replica's activations.
--
-- A replica that follows another's commits reads each notified activation
-- by its scope and generation, and fills a gap by a range of generations.
-- Through events_scope_seq alone both filter the scope's history row by
-- row; this index answers both from the entries wanted. Only the events
-- that allocate a generation (activations and deactivations) have one, so
-- only they are indexed: one entry per commit.
--
-- Building it locks the events table against writes for as long as it
-- takes to read it (about a second per million events here).
CREATE INDEX events_scope_generation ON events (scope, generation) WHERE generation IS NOT NULL;

-- varplane_follow returns, for each (p_scope[i], p_generation[i]), the
-- scope's activation event of that generation and, unless p_rev[i] names
-- its revision already (the caller holds that record), the revision's
-- record: one row (i, body, record) per activation found, none for an item
-- without one. A log that holds two activations of one generation is
-- damaged; up to two rows are returned for the item so that the caller
-- sees it.
--
-- It is a function so that its query is planned once per session, and the
-- same way on every database: the plan kept (plan_cache_mode) is generic,
-- with index lookups only (sequential and bitmap scans off), and each
-- record is read by a subquery on the whole primary key of revisions. As a
-- join, a plan made on a new database (no statistics, tables of a few
-- pages) looked revisions up by scope alone and compared the revision row
-- by row: once the log had grown, every call read the scope's every
-- revision (4 ms a call against 0.2 ms). And left to choose, PostgreSQL
-- planned a call of a few items anew every time (its custom plan looked
-- cheaper), which cost more than running it (pgbench, 3 items: 0.45 ms a
-- call planned each time, 0.18 ms with the plan kept).
CREATE FUNCTION varplane_follow(p_scope text[], p_generation bigint[], p_rev text[])
RETURNS TABLE (i bigint, body json, record json)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
	RETURN QUERY SELECT c.i, e.body,
		CASE WHEN e.rev IS NOT DISTINCT FROM c.rev THEN NULL
			ELSE (SELECT r.record FROM revisions r WHERE r.scope = c.scope AND r.revision = e.rev) END
	FROM unnest(p_scope, p_generation, p_rev) WITH ORDINALITY AS c(scope, generation, rev, i)
	CROSS JOIN LATERAL (SELECT ev.body, ev.body->>'revision' AS rev FROM events ev
		WHERE ev.scope = c.scope AND ev.generation = c.generation AND ev.kind = 'activated' LIMIT 2) e;
END
$$;
