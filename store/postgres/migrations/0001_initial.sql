-- varplane schema version 1: the event log, revision records, heads and
-- idempotency records, and the commit functions that change them.
--
-- Every scope column uses the "C" collation, so that ORDER BY and the range
-- that selects a subtree (scope > 'a.' AND scope < 'a/') compare bytes, the
-- order varplane sorts scopes in.

-- events is the append-only audit log: one row per event, ordered by seq.
-- body is the event as varplane encodes it (the same JSON as a line of the
-- file store's log), kept verbatim.
CREATE TABLE events (
	seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	scope       text COLLATE "C" NOT NULL,
	kind        text NOT NULL CHECK (kind IN ('revision-created', 'activated', 'deactivated', 'rejected')),
	generation  bigint CHECK (generation > 0),
	body        json NOT NULL,
	recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_scope_seq ON events (scope, seq);

-- The log is append-only: an UPDATE or DELETE of an event is refused.
CREATE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'varplane events are append-only (% refused)', TG_OP;
END
$$;
CREATE TRIGGER events_append_only BEFORE UPDATE OR DELETE ON events
	FOR EACH ROW EXECUTE FUNCTION events_append_only();

-- revisions holds every revision record, content-addressed within its scope:
-- record is the varplane.RevisionRecord JSON (document included).
CREATE TABLE revisions (
	scope       text COLLATE "C" NOT NULL,
	revision    text NOT NULL CHECK (revision ~ '^sha256:[0-9a-f]{64}$'),
	record      json NOT NULL,
	recorded_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (scope, revision)
);

-- heads holds one row per scope that has appeared in the log: the last
-- generation allocated, the active revision (NULL: nothing served) with the
-- event that activated it, the last rejection, and version, which every
-- write of the row increments: revalidation compares it. Only the primary
-- key indexes it, and pages keep room (fillfactor), so that the update of
-- every commit stays on its page (a HOT update, no index write).
CREATE TABLE heads (
	scope         text COLLATE "C" PRIMARY KEY,
	generation    bigint NOT NULL DEFAULT 0 CHECK (generation >= 0),
	revision      text,
	event         json,
	last_rejected json,
	version       bigint NOT NULL DEFAULT 0,
	updated_at    timestamptz NOT NULL DEFAULT now(),
	CHECK ((revision IS NULL) = (event IS NULL))
) WITH (fillfactor = 70);

-- idempotency remembers each idempotency key once (the primary key is the
-- unique constraint that refuses a reuse), the request it fingerprinted, the
-- event it appended and the scope's generation right after it.
CREATE TABLE idempotency (
	key          text PRIMARY KEY,
	request_hash text NOT NULL DEFAULT '',
	scope        text COLLATE "C" NOT NULL,
	generation   bigint NOT NULL,
	event_seq    bigint NOT NULL REFERENCES events (seq),
	recorded_at  timestamptz NOT NULL DEFAULT now()
);

-- The commit functions. Each runs as one statement, so as one transaction
-- when called outside one: a refusal (DUP, EXISTS, NOREV, CONFLICT) returns
-- before anything is written, and a failure part-way (a concurrent use of
-- the same idempotency key hits the primary key) rolls everything back.
-- Generations are compared under the head row's lock (a conditional UPDATE
-- for an activation, SELECT ... FOR UPDATE for a deactivation). Each returns the head's new version, from which the caller
-- installs the commit and builds its invalidation.
--
-- The invalidation is not sent from inside these transactions: a
-- transaction that calls NOTIFY holds a lock global to the cluster from
-- its commit until the commit record is flushed, so notifying commits
-- cannot share a WAL flush (64 concurrent committers measured 836
-- transactions/s with a NOTIFY each, 5,292 without). The store sends it
-- right after the commit, with varplane_notify below; a notification lost
-- when a writer dies between the two is caught by the next revalidation
-- pass of every replica.

CREATE FUNCTION varplane_create(p_scope text, p_revision text, p_record json, p_event json, p_key text, p_hash text,
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
	INSERT INTO revisions (scope, revision, record) VALUES (p_scope, p_revision, p_record) ON CONFLICT DO NOTHING;
	IF NOT FOUND THEN
		status := 'EXISTS';
		RETURN;
	END IF;
	INSERT INTO heads (scope) VALUES (p_scope) ON CONFLICT DO NOTHING;
	INSERT INTO events (scope, kind, body) VALUES (p_scope, 'revision-created', p_event) RETURNING seq INTO s;
	IF p_key IS NOT NULL THEN
		SELECT h.generation INTO g FROM heads h WHERE h.scope = p_scope;
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, g, s);
	END IF;
	status := 'OK';
END
$$;

-- varplane_activate also returns the record of the activated revision when
-- p_want_record is set (the caller does not hold it), and the scope's last
-- rejection, so the caller can install the new head without reading it back.
CREATE FUNCTION varplane_activate(p_scope text, p_expected bigint, p_generation bigint, p_revision text, p_event json,
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
	-- Records never change, so the revision can be checked first; the
	-- generation is then compared by the UPDATE itself, which waits for a
	-- concurrent commit of the same row and re-checks its condition on the
	-- row that commit left.
	IF p_want_record THEN
		SELECT r.record INTO rev_record FROM revisions r WHERE r.scope = p_scope AND r.revision = p_revision;
	ELSE
		PERFORM 1 FROM revisions r WHERE r.scope = p_scope AND r.revision = p_revision;
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

-- varplane_reject records a rejected event as the scope's last rejection.
CREATE FUNCTION varplane_reject(p_scope text, p_event json, p_key text, p_hash text,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint)
LANGUAGE plpgsql AS $$
DECLARE
	s bigint;
BEGIN
	IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM idempotency WHERE key = p_key) THEN
		status := 'DUP';
		RETURN;
	END IF;
	INSERT INTO heads AS h (scope, last_rejected, version) VALUES (p_scope, p_event, 1)
		ON CONFLICT (scope) DO UPDATE SET last_rejected = EXCLUDED.last_rejected, version = h.version + 1, updated_at = now()
		RETURNING h.generation, h.version INTO cur_generation, new_version;
	INSERT INTO events (scope, kind, body) VALUES (p_scope, 'rejected', p_event) RETURNING seq INTO s;
	IF p_key IS NOT NULL THEN
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, cur_generation, s);
	END IF;
	status := 'OK';
END
$$;

-- varplane_deactivate deactivates p_scope at p_generation and every active
-- descendant at its own next generation. It chooses the descendants itself,
-- locking them in scope order (the parent first, so two subtree
-- deactivations never lock in opposite orders), so no concurrent activation
-- slips between choosing and clearing them. p_event_head is the parent's
-- event JSON without its closing brace (the cascade is spliced in), p_tail
-- the ',"actor":…,"reason":…,"timestamp":…}' end of a descendant's event.
-- descendants is a JSON array of {scope, generation, version, lastRejected}.
CREATE FUNCTION varplane_deactivate(p_scope text, p_expected bigint, p_generation bigint, p_event_head text, p_tail text,
	p_key text, p_hash text,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT last_rejected json, OUT descendants json)
LANGUAGE plpgsql AS $$
DECLARE
	g bigint;
	s bigint;
	v bigint;
	d record;
	casc text[] := '{}';
	drows json[] := '{}';
	ev text;
BEGIN
	IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM idempotency WHERE key = p_key) THEN
		status := 'DUP';
		RETURN;
	END IF;
	SELECT h.generation, h.last_rejected INTO g, last_rejected FROM heads h WHERE h.scope = p_scope FOR UPDATE;
	IF NOT FOUND THEN
		IF p_expected <> 0 THEN
			status := 'CONFLICT';
			cur_generation := 0;
			RETURN;
		END IF;
		INSERT INTO heads (scope) VALUES (p_scope) ON CONFLICT DO NOTHING;
		SELECT h.generation, h.last_rejected INTO g, last_rejected FROM heads h WHERE h.scope = p_scope FOR UPDATE;
	END IF;
	IF g <> p_expected THEN
		status := 'CONFLICT';
		cur_generation := g;
		last_rejected := NULL;
		RETURN;
	END IF;
	FOR d IN SELECT h.scope, h.generation, h.last_rejected FROM heads h
		WHERE h.scope > p_scope || '.' AND h.scope < p_scope || '/' AND h.revision IS NOT NULL
		ORDER BY h.scope FOR UPDATE
	LOOP
		UPDATE heads SET generation = d.generation + 1, revision = NULL, event = NULL, version = version + 1, updated_at = now()
			WHERE scope = d.scope RETURNING version INTO v;
		INSERT INTO events (scope, kind, generation, body) VALUES (d.scope, 'deactivated', d.generation + 1,
			format('{"kind":"deactivated","scope":%s,"generation":%s,"previousGeneration":%s%s',
				to_json(d.scope)::text, d.generation + 1, d.generation, p_tail)::json);
		casc := casc || format('{"scope":%s,"generation":%s}', to_json(d.scope)::text, d.generation + 1);
		drows := drows || json_build_object('scope', d.scope, 'generation', d.generation + 1, 'version', v, 'lastRejected', d.last_rejected);
	END LOOP;
	UPDATE heads SET generation = p_generation, revision = NULL, event = NULL, version = version + 1, updated_at = now()
		WHERE scope = p_scope RETURNING version INTO new_version;
	ev := p_event_head;
	IF cardinality(casc) > 0 THEN
		ev := ev || ',"cascade":[' || array_to_string(casc, ',') || ']';
	END IF;
	ev := ev || '}';
	INSERT INTO events (scope, kind, generation, body) VALUES (p_scope, 'deactivated', p_generation, ev::json) RETURNING seq INTO s;
	IF p_key IS NOT NULL THEN
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, p_generation, s);
	END IF;
	status := 'OK';
	cur_generation := p_generation;
	descendants := array_to_json(drows);
END
$$;

-- varplane_notify sends invalidations on p_channel, one notification per
-- payload, in order. Its transaction commits asynchronously
-- (synchronous_commit off, for this transaction only): it writes nothing
-- that must survive a crash, so it neither waits for a WAL flush nor holds
-- the notification lock through one. A payload is "<kind>\n<version>
-- <generation> <scope>", with one more line per descendant a subtree
-- deactivation cleared, or "<kind>\n*" when it would not fit in a
-- notification (8000 bytes): every replica then revalidates everything.
CREATE FUNCTION varplane_notify(p_channel text, p_payloads text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	p text;
BEGIN
	PERFORM set_config('synchronous_commit', 'off', true);
	FOREACH p IN ARRAY p_payloads LOOP
		PERFORM pg_notify(p_channel, p);
	END LOOP;
END
$$;
