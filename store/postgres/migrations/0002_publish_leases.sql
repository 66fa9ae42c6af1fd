-- varplane schema version 2: the atomic publish, leases, and the mark of a
-- reclaimed revision body.

-- leases coordinates maintenance passes among the processes sharing the
-- schema: one row per lease held (or expired and not yet taken again).
-- expires is the database's clock, so replicas with skewed clocks agree.
CREATE TABLE leases (
	name    text COLLATE "C" PRIMARY KEY,
	holder  text NOT NULL,
	expires timestamptz NOT NULL
);

-- reclaimed_at marks a revision whose body retention reclaimed: the row
-- stays (Revision answers revision-reclaimed rather than not-found), and
-- NULL means the record is whole. Nothing in this release sets it.
ALTER TABLE revisions ADD COLUMN reclaimed_at timestamptz;

-- varplane_publish stores a revision (unless the scope stores it already)
-- and activates it, in one transaction. It locks the scope's head row
-- first, as varplane_deactivate does, and compares the generation before
-- it looks for the revision or writes anything: of racing publishers on one
-- generation exactly one proceeds, and every other sees CONFLICT, never a
-- unique violation on revisions, and leaves no revision behind.
--
-- p_created is the revision-created event carrying the idempotency key,
-- p_activated the activation without it and p_activated_keyed with it: the
-- key goes with the first event the publish appends, at generation
-- p_expected with a new revision, at p_generation with a found one.
-- created reports which; rev_record is the stored record when found.
CREATE FUNCTION varplane_publish(p_scope text, p_expected bigint, p_generation bigint, p_revision text,
	p_record json, p_created json, p_activated json, p_activated_keyed json, p_key text, p_hash text,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT last_rejected json,
	OUT rev_record json, OUT created boolean)
LANGUAGE plpgsql AS $$
DECLARE
	g bigint;
	s bigint;
	act json;
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
		-- A concurrent first publish of the scope makes this wait for it;
		-- the lock below then sees the generation it left.
		INSERT INTO heads (scope) VALUES (p_scope) ON CONFLICT DO NOTHING;
		SELECT h.generation INTO g FROM heads h WHERE h.scope = p_scope FOR UPDATE;
	END IF;
	IF g <> p_expected THEN
		status := 'CONFLICT';
		cur_generation := g;
		RETURN;
	END IF;
	SELECT r.record INTO rev_record FROM revisions r WHERE r.scope = p_scope AND r.revision = p_revision;
	created := NOT FOUND;
	IF created THEN
		-- A plain create of the same revision (which takes no head lock)
		-- may commit in between: then the revision is found after all.
		INSERT INTO revisions (scope, revision, record) VALUES (p_scope, p_revision, p_record) ON CONFLICT DO NOTHING;
		created := FOUND;
		IF NOT created THEN
			SELECT r.record INTO rev_record FROM revisions r WHERE r.scope = p_scope AND r.revision = p_revision;
		END IF;
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

-- varplane_create as in version 1, but adding the scope's heads row before
-- the revision: a first publish of a scope inserts that row (and holds it)
-- before it inserts the revision, so a create that inserted the revision
-- first and then waited for the row would deadlock with it. In this order
-- the create waits for the publish's row and then finds its revision
-- (EXISTS); a row already committed is not locked by DO NOTHING, so the
-- create never waits for a publish that holds it.
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
	-- Written only when the scope is new, and then kept only if the
	-- revision is new too (an EXISTS refusal finds the row the revision's
	-- own creation committed).
	INSERT INTO heads (scope) VALUES (p_scope) ON CONFLICT DO NOTHING;
	INSERT INTO revisions (scope, revision, record) VALUES (p_scope, p_revision, p_record) ON CONFLICT DO NOTHING;
	IF NOT FOUND THEN
		status := 'EXISTS';
		RETURN;
	END IF;
	INSERT INTO events (scope, kind, body) VALUES (p_scope, 'revision-created', p_event) RETURNING seq INTO s;
	IF p_key IS NOT NULL THEN
		SELECT h.generation INTO g FROM heads h WHERE h.scope = p_scope;
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, g, s);
	END IF;
	status := 'OK';
END
$$;
