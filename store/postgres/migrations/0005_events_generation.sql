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
-- It is a function so that its query is planned at every call, with the
-- tables as they are then (plan_cache_mode), and never as a scan of the
-- log (sequential scans off). A plan kept from a call made while the
-- tables were nearly empty (a new database, where reading a page or two
-- costs less than an index lookup, and either index of events serves a
-- scope as well as the other) scanned the whole log, or the scope's whole
-- history, at every call once it had grown, for as long as no ANALYZE
-- invalidated it (3 to 20 ms a call where the index takes 0.2 ms). The
-- planning costs about 0.3 ms a call (pgbench, 3 items: 0.45 ms a call
-- planned each time, 0.18 ms with a plan kept); a call reads the commits
-- of a whole notification.
CREATE FUNCTION varplane_follow(p_scope text[], p_generation bigint[], p_rev text[])
RETURNS TABLE (i bigint, body json, record json)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
	RETURN QUERY SELECT c.i, e.body, CASE WHEN e.rev IS NOT DISTINCT FROM c.rev THEN NULL ELSE r.record END
	FROM unnest(p_scope, p_generation, p_rev) WITH ORDINALITY AS c(scope, generation, rev, i)
	CROSS JOIN LATERAL (SELECT ev.body, ev.body->>'revision' AS rev FROM events ev
		WHERE ev.scope = c.scope AND ev.generation = c.generation AND ev.kind = 'activated' LIMIT 2) e
	LEFT JOIN revisions r ON r.scope = c.scope AND r.revision = e.rev;
END
$$;
