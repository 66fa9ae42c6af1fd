-- varplane schema version 6: retention reclaims revision bodies.
--
-- A reclaimed revision keeps its row, marked reclaimed_at, so that a read
-- of it answers revision-reclaimed rather than not-found; its record (the
-- document with it) is dropped. The log keeps every event: the
-- revision-created event of a reclaimed revision loses its document, and
-- that is the one edit the log allows.
--
-- Locks: a reclamation (ReclaimRevisions, store/postgres/reclaim.go) locks
-- the revision rows it reclaims FOR UPDATE, skipping any another
-- transaction holds, and only then reads the scope's head, in a later
-- statement, leaving the head's revision alone. Every commit that makes a
-- revision the head first locks the revision row FOR KEY SHARE, which
-- conflicts with that lock only. So an activation either holds its row
-- before the reclamation looks at it (the row is skipped, kept) or waits
-- for the reclamation to commit and then finds the revision reclaimed
-- (not-found); a head's body is never reclaimed. A reclamation never waits
-- for a lock, so it takes no part in a deadlock.
--
-- A create or publish of a reclaimed revision's document stores its body
-- again: the revision is created anew, with a new revision-created event,
-- as the file and Redis stores do.

-- Adding the check reads the table once, under the ALTER's lock.
ALTER TABLE revisions ALTER COLUMN record DROP NOT NULL,
	ADD CONSTRAINT revisions_record_kept CHECK (record IS NOT NULL OR reclaimed_at IS NOT NULL);

-- The log stays append-only but for one edit: the revision-created event
-- of a revision marked reclaimed may lose its document, every other column
-- and member unchanged.
CREATE OR REPLACE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'UPDATE' AND OLD.kind = 'revision-created'
		AND NEW.seq = OLD.seq AND NEW.scope = OLD.scope AND NEW.kind = OLD.kind
		AND NEW.generation IS NOT DISTINCT FROM OLD.generation AND NEW.recorded_at = OLD.recorded_at
		AND OLD.body::jsonb ? 'document' AND NEW.body::jsonb = OLD.body::jsonb - 'document'
		AND EXISTS (SELECT 1 FROM revisions r
			WHERE r.scope = OLD.scope AND r.revision = OLD.body->>'revision' AND r.reclaimed_at IS NOT NULL) THEN
		RETURN NEW;
	END IF;
	RAISE EXCEPTION 'varplane events are append-only (% refused)', TG_OP;
END
$$;

-- varplane_create as in version 2, but a revision whose body was
-- reclaimed is stored again (a new creation) instead of answering EXISTS.
CREATE OR REPLACE FUNCTION varplane_create(p_scope text, p_revision text, p_record json, p_event json, p_key text, p_hash text,
	OUT status text)
LANGUAGE plpgsql AS $$
DECLARE
	s bigint;
	g bigint;
BEGIN
	IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM idempotency WHERE key = p_key) THEN
		status := 'DUP';
		RETURN;
	END IF;
	INSERT INTO heads (scope) VALUES (p_scope) ON CONFLICT DO NOTHING;
	INSERT INTO revisions (scope, revision, record) VALUES (p_scope, p_revision, p_record) ON CONFLICT DO NOTHING;
	IF NOT FOUND THEN
		UPDATE revisions SET record = p_record, reclaimed_at = NULL, recorded_at = now()
			WHERE scope = p_scope AND revision = p_revision AND reclaimed_at IS NOT NULL;
		IF NOT FOUND THEN
			status := 'EXISTS';
			RETURN;
		END IF;
	END IF;
	INSERT INTO events (scope, kind, body) VALUES (p_scope, 'revision-created', p_event) RETURNING seq INTO s;
	IF p_key IS NOT NULL THEN
		SELECT h.generation INTO g FROM heads h WHERE h.scope = p_scope;
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, g, s);
	END IF;
	status := 'OK';
END
$$;

-- varplane_activate as in version 1, but the revision must be stored whole
-- (not reclaimed: NOREV otherwise), and its row is locked FOR KEY SHARE
-- until the commit, so that no reclamation takes it meanwhile.
CREATE OR REPLACE FUNCTION varplane_activate(p_scope text, p_expected bigint, p_generation bigint, p_revision text, p_event json,
	p_key text, p_hash text, p_want_record boolean,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT last_rejected json, OUT rev_record json)
LANGUAGE plpgsql AS $$
DECLARE
	g bigint;
	s bigint;
BEGIN
	IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM idempotency WHERE key = p_key) THEN
		status := 'DUP';
		RETURN;
	END IF;
	-- The revision is checked (and held) first; the generation is then
	-- compared by the UPDATE itself, which waits for a concurrent commit of
	-- the same row and re-checks its condition on the row that commit left.
	IF p_want_record THEN
		SELECT r.record INTO rev_record FROM revisions r
			WHERE r.scope = p_scope AND r.revision = p_revision AND r.reclaimed_at IS NULL FOR KEY SHARE;
	ELSE
		PERFORM 1 FROM revisions r
			WHERE r.scope = p_scope AND r.revision = p_revision AND r.reclaimed_at IS NULL FOR KEY SHARE;
	END IF;
	IF NOT FOUND THEN
		SELECT h.generation INTO g FROM heads h WHERE h.scope = p_scope;
		cur_generation := coalesce(g, 0);
		status := CASE WHEN cur_generation <> p_expected THEN 'CONFLICT' ELSE 'NOREV' END;
		RETURN;
	END IF;
	UPDATE heads SET generation = p_generation, revision = p_revision, event = p_event, version = version + 1, updated_at = now()
		WHERE scope = p_scope AND generation = p_expected
		RETURNING heads.version, heads.last_rejected INTO new_version, last_rejected;
	IF NOT FOUND THEN
		SELECT h.generation INTO g FROM heads h WHERE h.scope = p_scope;
		status := 'CONFLICT';
		cur_generation := coalesce(g, 0);
		rev_record := NULL;
		RETURN;
	END IF;
	INSERT INTO events (scope, kind, generation, body) VALUES (p_scope, 'activated', p_generation, p_event) RETURNING seq INTO s;
	IF p_key IS NOT NULL THEN
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, p_generation, s);
	END IF;
	status := 'OK';
	cur_generation := p_generation;
END
$$;

-- varplane_publish as in version 2, but a revision found is locked FOR KEY
-- SHARE, and one found reclaimed has its body stored again (the publish
-- then creates it anew).
CREATE OR REPLACE FUNCTION varplane_publish(p_scope text, p_expected bigint, p_generation bigint, p_revision text,
	p_record json, p_created json, p_activated json, p_activated_keyed json, p_key text, p_hash text,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT last_rejected json,
	OUT rev_record json, OUT created boolean)
LANGUAGE plpgsql AS $$
DECLARE
	g bigint;
	s bigint;
	act json;
	gone boolean := false;
BEGIN
	IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM idempotency WHERE key = p_key) THEN
		status := 'DUP';
		RETURN;
	END IF;
	SELECT h.generation INTO g FROM heads h WHERE h.scope = p_scope FOR UPDATE;
	IF NOT FOUND THEN
		IF p_expected <> 0 THEN
			status := 'CONFLICT';
			cur_generation := 0;
			RETURN;
		END IF;
		INSERT INTO heads (scope) VALUES (p_scope) ON CONFLICT DO NOTHING;
		SELECT h.generation INTO g FROM heads h WHERE h.scope = p_scope FOR UPDATE;
	END IF;
	IF g <> p_expected THEN
		status := 'CONFLICT';
		cur_generation := g;
		RETURN;
	END IF;
	SELECT r.record, r.reclaimed_at IS NOT NULL INTO rev_record, gone FROM revisions r
		WHERE r.scope = p_scope AND r.revision = p_revision FOR KEY SHARE;
	created := NOT FOUND;
	IF created THEN
		-- A plain create of the same revision (which takes no head lock)
		-- may commit in between: then the revision is found after all.
		INSERT INTO revisions (scope, revision, record) VALUES (p_scope, p_revision, p_record) ON CONFLICT DO NOTHING;
		created := FOUND;
		IF NOT created THEN
			SELECT r.record, r.reclaimed_at IS NOT NULL INTO rev_record, gone FROM revisions r
				WHERE r.scope = p_scope AND r.revision = p_revision FOR KEY SHARE;
		END IF;
	END IF;
	IF gone THEN
		UPDATE revisions SET record = p_record, reclaimed_at = NULL, recorded_at = now()
			WHERE scope = p_scope AND revision = p_revision;
		created := true;
		rev_record := NULL;
	END IF;
	IF created THEN
		INSERT INTO events (scope, kind, body) VALUES (p_scope, 'revision-created', p_created) RETURNING seq INTO s;
		IF p_key IS NOT NULL THEN
			INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, p_expected, s);
		END IF;
		act := p_activated;
		INSERT INTO events (scope, kind, generation, body) VALUES (p_scope, 'activated', p_generation, act);
	ELSE
		act := p_activated_keyed;
		INSERT INTO events (scope, kind, generation, body) VALUES (p_scope, 'activated', p_generation, act) RETURNING seq INTO s;
		IF p_key IS NOT NULL THEN
			INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, p_generation, s);
		END IF;
	END IF;
	UPDATE heads SET generation = p_generation, revision = p_revision, event = act, version = version + 1, updated_at = now()
		WHERE scope = p_scope
		RETURNING heads.version, heads.last_rejected INTO new_version, last_rejected;
	status := 'OK';
	cur_generation := p_generation;
END
$$;

-- varplane_publish_batch as in version 4, but a revision found is locked
-- FOR KEY SHARE, and one found reclaimed has its body stored again, as in
-- varplane_publish above. Its refusals and writes are still those of
-- calling varplane_publish for each item in turn.
CREATE OR REPLACE FUNCTION varplane_publish_batch(p_scope text[], p_expected bigint[], p_generation bigint[], p_revision text[],
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
	gone boolean;
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
	-- read back (it was found, and is held FOR KEY SHARE; a reclaimed one
	-- has its body stored again), so a batch of new revisions reads
	-- nothing.
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
			SELECT rv.record, rv.reclaimed_at IS NOT NULL INTO r, gone FROM revisions rv
				WHERE rv.scope = p_scope[i] AND rv.revision = p_revision[i] FOR KEY SHARE;
			IF gone THEN
				UPDATE revisions SET record = p_record[i], reclaimed_at = NULL, recorded_at = now()
					WHERE scope = p_scope[i] AND revision = p_revision[i];
				cre[i] := true;
			ELSE
				rec[i] := r;
				cre[i] := false;
			END IF;
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
