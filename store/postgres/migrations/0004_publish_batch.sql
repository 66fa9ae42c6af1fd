-- varplane schema version 4: publishes of a commit batch in one statement.
--
-- varplane_publish_batch runs n publishes (item i: the i-th element of
-- every array, the arguments of varplane_publish) and returns one row per
-- item, in item order, with varplane_publish's answer to it. The answers
-- and the writes are those of calling varplane_publish for item 1, then 2,
-- ... in one transaction: each item is compared with its own expected
-- generation, and a refused item (DUP, CONFLICT) writes nothing.
--
-- When two items share a scope or an idempotency key, a later item depends
-- on what an earlier one wrote; such a call does exactly that, one
-- varplane_publish per item. Otherwise the items are independent and each
-- step runs once for all of them, a handful of statements instead of about
-- seven per item: this is what a batch of concurrent publishers (each on
-- its own scope) costs the server. The steps keep varplane_publish's order:
-- recorded keys (DUP); the heads rows of first publishes; the rows locked in
-- scope order (two batches never lock in opposite orders) and their
-- generations compared (CONFLICT, nothing written); the records, each
-- created unless its scope stores it already (then it is found and read);
-- the events, in item order and within an item created before activated;
-- the keys, with the first event of their item; the heads.
-- The check on a revision's form, written so that it costs a fraction of
-- what it did: PostgreSQL's regular expressions expand a bounded
-- repetition ({64}) into as many states, and matching the version 1 form
-- cost about 8 µs of every revision inserted; a length and an unbounded
-- class accept exactly the same strings. The rows stored satisfy the old
-- form, so the new one is added without checking them under the ALTER's
-- lock, then validated (a scan that does not block writes).
ALTER TABLE revisions DROP CONSTRAINT revisions_revision_check,
	ADD CONSTRAINT revisions_revision_check CHECK (length(revision) = 71 AND revision ~ '^sha256:[0-9a-f]+$') NOT VALID;
ALTER TABLE revisions VALIDATE CONSTRAINT revisions_revision_check;

CREATE FUNCTION varplane_publish_batch(p_scope text[], p_expected bigint[], p_generation bigint[], p_revision text[],
	p_record json[], p_created json[], p_activated json[], p_activated_keyed json[], p_key text[], p_hash text[])
RETURNS TABLE (status text, cur_generation bigint, new_version bigint, last_rejected json, rev_record json, created boolean)
LANGUAGE plpgsql AS $$
DECLARE
	n int := coalesce(cardinality(p_scope), 0);
	st text[] := array_fill(NULL::text, ARRAY[n]);
	cur bigint[] := array_fill(0::bigint, ARRAY[n]);
	ver bigint[] := array_fill(NULL::bigint, ARRAY[n]);
	rej json[] := array_fill(NULL::json, ARRAY[n]);
	rec json[] := array_fill(NULL::json, ARRAY[n]);
	cre boolean[] := array_fill(NULL::boolean, ARRAY[n]);
	go_scopes text[];
	i int;
	g bigint;
	v bigint;
	r json;
BEGIN
	IF n = 0 THEN
		RETURN;
	END IF;
	IF (SELECT count(DISTINCT s) FROM unnest(p_scope) s) < n
		OR (SELECT count(DISTINCT k) < count(k) FROM unnest(p_key) k) THEN
		FOR i IN 1..n LOOP
			RETURN QUERY SELECT * FROM varplane_publish(p_scope[i], p_expected[i], p_generation[i], p_revision[i],
				p_record[i], p_created[i], p_activated[i], p_activated_keyed[i], p_key[i], p_hash[i]);
		END LOOP;
		RETURN;
	END IF;

	FOR i IN SELECT array_position(p_key, d.key) FROM idempotency d WHERE d.key = ANY (p_key) LOOP
		st[i] := 'DUP';
	END LOOP;
	-- As in varplane_publish, a concurrent first publish of a scope makes
	-- this wait for it; the lock below then sees the generation it left.
	INSERT INTO heads (scope)
		SELECT p_scope[j] FROM generate_subscripts(p_scope, 1) j WHERE st[j] IS NULL AND p_expected[j] = 0 ORDER BY j
		ON CONFLICT DO NOTHING;
	FOR i, g IN SELECT array_position(p_scope, h.scope::text), h.generation FROM heads h
		WHERE h.scope = ANY (p_scope) ORDER BY h.scope FOR UPDATE
	LOOP
		IF st[i] IS NULL THEN
			cur[i] := g;
			IF g = p_expected[i] THEN
				st[i] := 'OK';
			END IF;
		END IF;
	END LOOP;
	FOR i IN 1..n LOOP
		IF st[i] IS NULL THEN
			st[i] := 'CONFLICT'; -- cur: the row's generation, 0 without a row
		ELSIF st[i] = 'DUP' THEN
			cur[i] := NULL;
		END IF;
	END LOOP;
	SELECT array_agg(p_scope[j]) INTO go_scopes FROM generate_subscripts(p_scope, 1) j WHERE st[j] = 'OK';
	IF go_scopes IS NULL THEN
		RETURN QUERY SELECT st[j], cur[j], NULL::bigint, NULL::json, NULL::json, NULL::boolean
			FROM generate_subscripts(p_scope, 1) j ORDER BY j;
		RETURN;
	END IF;

	-- The records are inserted unless the scope stores them already: an
	-- insert that conflicts writes nothing, and only its item's record is
	-- read back (it was found), so a batch of new revisions reads nothing.
	FOR i IN INSERT INTO revisions (scope, revision, record)
		SELECT p_scope[j], p_revision[j], p_record[j] FROM generate_subscripts(p_scope, 1) j
			WHERE st[j] = 'OK' ORDER BY j
		ON CONFLICT DO NOTHING
		RETURNING array_position(p_scope, revisions.scope::text)
	LOOP
		cre[i] := true;
	END LOOP;
	FOR i IN 1..n LOOP
		IF st[i] = 'OK' AND cre[i] IS NULL THEN
			SELECT rv.record INTO r FROM revisions rv WHERE rv.scope = p_scope[i] AND rv.revision = p_revision[i];
			rec[i] := r;
			cre[i] := false;
		END IF;
	END LOOP;

	IF NOT EXISTS (SELECT FROM generate_subscripts(p_scope, 1) j WHERE st[j] = 'OK' AND p_key[j] IS NOT NULL) THEN
		INSERT INTO events (scope, kind, generation, body)
			SELECT p_scope[j], e.kind, e.gen, e.body FROM generate_subscripts(p_scope, 1) j,
				LATERAL (VALUES (1, 'revision-created', NULL::bigint, p_created[j]),
					(2, 'activated', p_generation[j], CASE WHEN cre[j] THEN p_activated[j] ELSE p_activated_keyed[j] END)) e (o, kind, gen, body)
			WHERE st[j] = 'OK' AND (e.o = 2 OR cre[j]) ORDER BY j, e.o;
	ELSE
		WITH ev AS (
			INSERT INTO events (scope, kind, generation, body)
				SELECT p_scope[j], e.kind, e.gen, e.body FROM generate_subscripts(p_scope, 1) j,
					LATERAL (VALUES (1, 'revision-created', NULL::bigint, p_created[j]),
						(2, 'activated', p_generation[j], CASE WHEN cre[j] THEN p_activated[j] ELSE p_activated_keyed[j] END)) e (o, kind, gen, body)
				WHERE st[j] = 'OK' AND (e.o = 2 OR cre[j]) ORDER BY j, e.o
				RETURNING events.scope, events.kind, events.seq
		)
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq)
			SELECT p_key[j], p_hash[j], ev.scope, CASE WHEN cre[j] THEN p_expected[j] ELSE p_generation[j] END, ev.seq
			FROM ev, LATERAL array_position(p_scope, ev.scope::text) j
			WHERE p_key[j] IS NOT NULL AND (ev.kind = 'revision-created') = cre[j];
	END IF;

	FOR i, v, r IN UPDATE heads h SET generation = p_generation[u.j], revision = p_revision[u.j],
			event = CASE WHEN cre[u.j] THEN p_activated[u.j] ELSE p_activated_keyed[u.j] END,
			version = h.version + 1, updated_at = now()
		FROM (SELECT array_position(p_scope, s) AS j, s FROM unnest(go_scopes) s) u
		WHERE h.scope = u.s
		RETURNING u.j, h.version, h.last_rejected
	LOOP
		ver[i] := v;
		rej[i] := r;
		cur[i] := p_generation[i];
	END LOOP;
	RETURN QUERY SELECT st[j], cur[j], ver[j], rej[j], CASE WHEN cre[j] THEN NULL ELSE rec[j] END, cre[j]
		FROM generate_subscripts(p_scope, 1) j ORDER BY j;
END
$$;
