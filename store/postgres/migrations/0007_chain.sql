-- varplane schema version 7: every event a commit function appends is
-- linked into its scope's chain (chain.go in the varplane package).
--
-- Each event gets seq (its place in the scope's chain, from 1) and hash:
--
--	hash(n) = hex(sha256(raw(hash(n-1)) || int8send(seq(n)) || content(n)))
--
-- where content(n) is the RFC 8785 form of the event without seq, hash and
-- document, which the Go side builds (varplane.AppendChainContent) and
-- passes as bytea: canonical JSON is not something to write twice. The link
-- is computed here, in the transaction that appends the event and under the
-- lock of the scope's heads row, which every commit function takes and
-- which holds the chain's head (chain_seq, chain_hash). So a refused commit
-- takes no link (it returns before computing one, or its transaction rolls
-- back), and two replicas committing to one scope are serialised by that
-- row: no two events of a scope can get the same seq. Every write that
-- advances the chain also increments the row's version, so a replica that
-- holds a row version holds its chain head too.
--
-- A body reaches the database without its seq and hash (the Go side encodes
-- it before the link exists) and without its closing brace, as text;
-- varplane_linked appends the two members and the brace and parses it as
-- json once.
--
-- Events appended before this version have no link. A scope's chain starts
-- with its first event appended after it, at seq 1 (chain_seq 0 and a NULL
-- chain_hash: no link yet); a verifier counts the earlier events as
-- unchained.
--
-- The commit functions take new arguments (the content of each event they
-- may append), so they are new overloads. The previous signatures are
-- replaced by ones that refuse: a replica of an earlier release still
-- running would otherwise append events without links and break every
-- chain it wrote to. Upgrade every writer together (docs/postgres.md).

ALTER TABLE heads ADD COLUMN chain_seq bigint NOT NULL DEFAULT 0 CHECK (chain_seq >= 0),
	ADD COLUMN chain_hash text,
	ADD CONSTRAINT heads_chain_linked CHECK ((chain_seq = 0) = (chain_hash IS NULL));

-- varplane_link returns the hash of the event that follows the link p_prev
-- (NULL: none, the chain's first event) at p_seq, whose content is p_content.
CREATE FUNCTION varplane_link(p_prev text, p_seq bigint, p_content bytea) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT encode(sha256(coalesce(decode(p_prev, 'hex'), '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea)
		|| int8send(p_seq) || p_content), 'hex')
$$;

-- varplane_linked returns the event JSON whose members but its link are
-- p_open (an object without its closing brace) with its link appended: the
-- members eventjson writes last. Every function in it is immutable, so the
-- planner inlines it (a text || bigint, or left() on the whole body, made
-- a call cost about 7 µs against 1.7).
CREATE FUNCTION varplane_linked(p_open text, p_seq bigint, p_hash text) RETURNS json
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT (p_open || ',"seq":' || p_seq::text || ',"hash":"' || p_hash || '"}')::json
$$;

-- varplane_lock_head locks p_scope's heads row, adding it if new, and
-- returns its generation and chain head.
CREATE FUNCTION varplane_lock_head(p_scope text, OUT generation bigint, OUT chain_seq bigint, OUT chain_hash text)
LANGUAGE plpgsql AS $$
BEGIN
	SELECT h.generation, h.chain_seq, h.chain_hash INTO generation, chain_seq, chain_hash
		FROM heads h WHERE h.scope = p_scope FOR UPDATE;
	IF NOT FOUND THEN
		INSERT INTO heads (scope) VALUES (p_scope) ON CONFLICT DO NOTHING;
		SELECT h.generation, h.chain_seq, h.chain_hash INTO generation, chain_seq, chain_hash
			FROM heads h WHERE h.scope = p_scope FOR UPDATE;
	END IF;
END
$$;

-- varplane_create as in version 6, linking the event (p_event is its JSON
-- without link and closing brace, p_content its content; so for every
-- body and content argument below). The heads row is
-- locked before the record is inserted, as a publish does (heads, then
-- revisions: the one order every commit takes them in).
CREATE FUNCTION varplane_create(p_scope text, p_revision text, p_record json, p_event text, p_content bytea,
	p_key text, p_hash text,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT link_seq bigint, OUT link_hash text)
LANGUAGE plpgsql AS $$
DECLARE
	s bigint;
	cs bigint;
	ch text;
BEGIN
	IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM idempotency WHERE key = p_key) THEN
		status := 'DUP';
		RETURN;
	END IF;
	SELECT l.generation, l.chain_seq, l.chain_hash INTO cur_generation, cs, ch FROM varplane_lock_head(p_scope) l;
	INSERT INTO revisions (scope, revision, record) VALUES (p_scope, p_revision, p_record) ON CONFLICT DO NOTHING;
	IF NOT FOUND THEN
		UPDATE revisions SET record = p_record, reclaimed_at = NULL, recorded_at = now()
			WHERE scope = p_scope AND revision = p_revision AND reclaimed_at IS NOT NULL;
		IF NOT FOUND THEN
			status := 'EXISTS';
			RETURN;
		END IF;
	END IF;
	link_seq := cs + 1;
	link_hash := varplane_link(ch, link_seq, p_content);
	INSERT INTO events (scope, kind, body) VALUES (p_scope, 'revision-created', varplane_linked(p_event, link_seq, link_hash))
		RETURNING seq INTO s;
	UPDATE heads SET chain_seq = link_seq, chain_hash = link_hash, version = version + 1, updated_at = now()
		WHERE scope = p_scope RETURNING heads.version INTO new_version;
	IF p_key IS NOT NULL THEN
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, cur_generation, s);
	END IF;
	status := 'OK';
END
$$;

-- varplane_activate as in version 6, linking the event. The link is
-- computed in the UPDATE that compares the generation, from the row that
-- UPDATE finally holds (it waits for a concurrent commit of the row and
-- re-evaluates on what that commit left).
CREATE FUNCTION varplane_activate(p_scope text, p_expected bigint, p_generation bigint, p_revision text, p_event text,
	p_content bytea, p_key text, p_hash text, p_want_record boolean,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT last_rejected json, OUT rev_record json,
	OUT link_seq bigint, OUT link_hash text)
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
	UPDATE heads h SET generation = p_generation, revision = p_revision,
		event = varplane_linked(p_event, h.chain_seq + 1, varplane_link(h.chain_hash, h.chain_seq + 1, p_content)),
		chain_seq = h.chain_seq + 1, chain_hash = varplane_link(h.chain_hash, h.chain_seq + 1, p_content),
		version = h.version + 1, updated_at = now()
		WHERE h.scope = p_scope AND h.generation = p_expected
		RETURNING h.version, h.last_rejected, h.chain_seq, h.chain_hash, h.event
		INTO new_version, last_rejected, link_seq, link_hash, act;
	IF NOT FOUND THEN
		SELECT h.generation INTO g FROM heads h WHERE h.scope = p_scope;
		status := 'CONFLICT';
		cur_generation := coalesce(g, 0);
		rev_record := NULL;
		RETURN;
	END IF;
	INSERT INTO events (scope, kind, generation, body) VALUES (p_scope, 'activated', p_generation, act) RETURNING seq INTO s;
	IF p_key IS NOT NULL THEN
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, p_generation, s);
	END IF;
	status := 'OK';
	cur_generation := p_generation;
END
$$;

-- varplane_reject as in version 1, linking the event.
CREATE FUNCTION varplane_reject(p_scope text, p_event text, p_content bytea, p_key text, p_hash text,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT link_seq bigint, OUT link_hash text)
LANGUAGE plpgsql AS $$
DECLARE
	s bigint;
	cs bigint;
	ch text;
	rej json;
BEGIN
	IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM idempotency WHERE key = p_key) THEN
		status := 'DUP';
		RETURN;
	END IF;
	SELECT l.generation, l.chain_seq, l.chain_hash INTO cur_generation, cs, ch FROM varplane_lock_head(p_scope) l;
	link_seq := cs + 1;
	link_hash := varplane_link(ch, link_seq, p_content);
	rej := varplane_linked(p_event, link_seq, link_hash);
	UPDATE heads SET last_rejected = rej, chain_seq = link_seq, chain_hash = link_hash, version = version + 1, updated_at = now()
		WHERE scope = p_scope RETURNING heads.version INTO new_version;
	INSERT INTO events (scope, kind, body) VALUES (p_scope, 'rejected', rej) RETURNING seq INTO s;
	IF p_key IS NOT NULL THEN
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, cur_generation, s);
	END IF;
	status := 'OK';
END
$$;

-- varplane_deactivate as in version 1, linking the parent's event (the
-- descendants' cascade entries carry no link: the parent's hash covers its
-- cascade). The parent's content is p_pre || p_post without a cascade; the
-- cascade member goes between them, which the Go side splits at the one
-- place RFC 8785's member order puts it (after "actor", when there is one:
-- p_pre is then more than the opening brace).
CREATE FUNCTION varplane_deactivate(p_scope text, p_expected bigint, p_generation bigint, p_event_head text, p_tail text,
	p_pre bytea, p_post bytea, p_key text, p_hash text,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT last_rejected json, OUT descendants json,
	OUT link_seq bigint, OUT link_hash text)
LANGUAGE plpgsql AS $$
DECLARE
	g bigint;
	s bigint;
	v bigint;
	cs bigint;
	ch text;
	d record;
	casc text[] := '{}';
	canon text[] := '{}';
	drows json[] := '{}';
	ev text;
	content bytea;
BEGIN
	IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM idempotency WHERE key = p_key) THEN
		status := 'DUP';
		RETURN;
	END IF;
	SELECT h.generation, h.last_rejected, h.chain_seq, h.chain_hash INTO g, last_rejected, cs, ch
		FROM heads h WHERE h.scope = p_scope FOR UPDATE;
	IF NOT FOUND THEN
		IF p_expected <> 0 THEN
			status := 'CONFLICT';
			cur_generation := 0;
			RETURN;
		END IF;
		INSERT INTO heads (scope) VALUES (p_scope) ON CONFLICT DO NOTHING;
		SELECT h.generation, h.last_rejected, h.chain_seq, h.chain_hash INTO g, last_rejected, cs, ch
			FROM heads h WHERE h.scope = p_scope FOR UPDATE;
	END IF;
	IF g <> p_expected THEN
		status := 'CONFLICT';
		cur_generation := g;
		last_rejected := NULL;
		RETURN;
	END IF;
	FOR d IN SELECT h.scope, h.generation, h.last_rejected, h.chain_seq, h.chain_hash FROM heads h
		WHERE h.scope > p_scope || '.' AND h.scope < p_scope || '/' AND h.revision IS NOT NULL
		ORDER BY h.scope FOR UPDATE
	LOOP
		UPDATE heads SET generation = d.generation + 1, revision = NULL, event = NULL, version = version + 1, updated_at = now()
			WHERE scope = d.scope RETURNING version INTO v;
		INSERT INTO events (scope, kind, generation, body) VALUES (d.scope, 'deactivated', d.generation + 1,
			format('{"kind":"deactivated","scope":%s,"generation":%s,"previousGeneration":%s%s',
				to_json(d.scope)::text, d.generation + 1, d.generation, p_tail)::json);
		casc := casc || format('{"scope":%s,"generation":%s}', to_json(d.scope)::text, d.generation + 1);
		-- RFC 8785: members sorted, and to_json escapes a string exactly
		-- as RFC 8785 does (", \ and control characters only).
		canon := canon || format('{"generation":%s,"scope":%s}', d.generation + 1, to_json(d.scope)::text);
		drows := drows || json_build_object('scope', d.scope, 'generation', d.generation + 1, 'version', v, 'lastRejected', d.last_rejected,
			'chainSeq', d.chain_seq, 'chainHash', d.chain_hash);
	END LOOP;
	ev := p_event_head;
	content := p_pre || p_post;
	IF cardinality(casc) > 0 THEN
		ev := ev || ',"cascade":[' || array_to_string(casc, ',') || ']';
		IF p_pre = '\x7b'::bytea THEN
			content := p_pre || convert_to('"cascade":[' || array_to_string(canon, ',') || '],', 'UTF8') || p_post;
		ELSE
			content := p_pre || convert_to(',"cascade":[' || array_to_string(canon, ',') || ']', 'UTF8') || p_post;
		END IF;
	END IF;
	link_seq := cs + 1;
	link_hash := varplane_link(ch, link_seq, content);
	UPDATE heads SET generation = p_generation, revision = NULL, event = NULL, version = version + 1, updated_at = now(),
		chain_seq = link_seq, chain_hash = link_hash
		WHERE scope = p_scope RETURNING version INTO new_version;
	INSERT INTO events (scope, kind, generation, body) VALUES (p_scope, 'deactivated', p_generation, varplane_linked(ev, link_seq, link_hash))
		RETURNING seq INTO s;
	IF p_key IS NOT NULL THEN
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, p_generation, s);
	END IF;
	status := 'OK';
	cur_generation := p_generation;
	descendants := array_to_json(drows);
END
$$;

-- varplane_publish as in version 6, linking its events: the
-- revision-created one (when the revision is new) and then the activation.
-- p_created_c, p_activated_c and p_activated_keyed_c are the contents of
-- p_created, p_activated and p_activated_keyed. created_hash is the
-- revision-created event's hash when it was appended (its seq is
-- link_seq - 1).
CREATE FUNCTION varplane_publish(p_scope text, p_expected bigint, p_generation bigint, p_revision text,
	p_record json, p_created text, p_activated text, p_activated_keyed text, p_key text, p_hash text,
	p_created_c bytea, p_activated_c bytea, p_activated_keyed_c bytea,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT last_rejected json,
	OUT rev_record json, OUT created boolean, OUT link_seq bigint, OUT link_hash text, OUT created_hash text)
LANGUAGE plpgsql AS $$
DECLARE
	g bigint;
	s bigint;
	cs bigint;
	ch text;
	act json;
	gone boolean := false;
BEGIN
	IF p_key IS NOT NULL AND EXISTS (SELECT 1 FROM idempotency WHERE key = p_key) THEN
		status := 'DUP';
		RETURN;
	END IF;
	SELECT h.generation, h.chain_seq, h.chain_hash INTO g, cs, ch FROM heads h WHERE h.scope = p_scope FOR UPDATE;
	IF NOT FOUND THEN
		IF p_expected <> 0 THEN
			status := 'CONFLICT';
			cur_generation := 0;
			RETURN;
		END IF;
		INSERT INTO heads (scope) VALUES (p_scope) ON CONFLICT DO NOTHING;
		SELECT h.generation, h.chain_seq, h.chain_hash INTO g, cs, ch FROM heads h WHERE h.scope = p_scope FOR UPDATE;
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
		-- A plain create of the same revision may have committed in
		-- between (it waited for this row's lock only if it came second).
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
		cs := cs + 1;
		ch := varplane_link(ch, cs, p_created_c);
		created_hash := ch;
		INSERT INTO events (scope, kind, body) VALUES (p_scope, 'revision-created', varplane_linked(p_created, cs, ch)) RETURNING seq INTO s;
		IF p_key IS NOT NULL THEN
			INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, p_expected, s);
		END IF;
		cs := cs + 1;
		ch := varplane_link(ch, cs, p_activated_c);
		act := varplane_linked(p_activated, cs, ch);
		INSERT INTO events (scope, kind, generation, body) VALUES (p_scope, 'activated', p_generation, act);
	ELSE
		cs := cs + 1;
		ch := varplane_link(ch, cs, p_activated_keyed_c);
		act := varplane_linked(p_activated_keyed, cs, ch);
		INSERT INTO events (scope, kind, generation, body) VALUES (p_scope, 'activated', p_generation, act) RETURNING seq INTO s;
		IF p_key IS NOT NULL THEN
			INSERT INTO idempotency (key, request_hash, scope, generation, event_seq) VALUES (p_key, p_hash, p_scope, p_generation, s);
		END IF;
	END IF;
	UPDATE heads SET generation = p_generation, revision = p_revision, event = act, version = version + 1, updated_at = now(),
		chain_seq = cs, chain_hash = ch
		WHERE scope = p_scope
		RETURNING heads.version, heads.last_rejected INTO new_version, last_rejected;
	status := 'OK';
	cur_generation := p_generation;
	link_seq := cs;
	link_hash := ch;
END
$$;

-- varplane_publish_batch as in version 6, linking each item's events as
-- varplane_publish does; the three content arrays are element by element
-- those of varplane_publish. Its refusals and writes are still those of
-- calling varplane_publish for each item in turn.
CREATE FUNCTION varplane_publish_batch(p_scope text[], p_expected bigint[], p_generation bigint[], p_revision text[],
	p_record json[], p_created text[], p_activated text[], p_activated_keyed text[], p_key text[], p_hash text[],
	p_created_c bytea[], p_activated_c bytea[], p_activated_keyed_c bytea[])
RETURNS TABLE (status text, cur_generation bigint, new_version bigint, last_rejected json, rev_record json, created boolean,
	link_seq bigint, link_hash text, created_hash text)
LANGUAGE plpgsql AS $$
DECLARE
	n int := coalesce(cardinality(p_scope), 0);
	st text[] := array_fill(NULL::text, ARRAY[n]);
	cur bigint[] := array_fill(0::bigint, ARRAY[n]);
	ver bigint[] := array_fill(NULL::bigint, ARRAY[n]);
	rej json[] := array_fill(NULL::json, ARRAY[n]);
	rec json[] := array_fill(NULL::json, ARRAY[n]);
	cre boolean[] := array_fill(NULL::boolean, ARRAY[n]);
	cseq bigint[] := array_fill(NULL::bigint, ARRAY[n]);
	chash text[] := array_fill(NULL::text, ARRAY[n]);
	crh text[] := array_fill(NULL::text, ARRAY[n]);
	bc json[] := array_fill(NULL::json, ARRAY[n]);
	ba json[] := array_fill(NULL::json, ARRAY[n]);
	go_scopes text[];
	i int;
	g bigint;
	v bigint;
	cs bigint;
	ch text;
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
				p_record[i], p_created[i], p_activated[i], p_activated_keyed[i], p_key[i], p_hash[i],
				p_created_c[i], p_activated_c[i], p_activated_keyed_c[i]);
		END LOOP;
		RETURN;
	END IF;

	FOR i IN SELECT array_position(p_key, d.key) FROM idempotency d WHERE d.key = ANY (p_key) LOOP
		st[i] := 'DUP';
	END LOOP;
	INSERT INTO heads (scope)
		SELECT p_scope[j] FROM generate_subscripts(p_scope, 1) j WHERE st[j] IS NULL AND p_expected[j] = 0 ORDER BY j
		ON CONFLICT DO NOTHING;
	FOR i, g, cs, ch IN SELECT array_position(p_scope, h.scope::text), h.generation, h.chain_seq, h.chain_hash FROM heads h
		WHERE h.scope = ANY (p_scope) ORDER BY h.scope FOR UPDATE
	LOOP
		IF st[i] IS NULL THEN
			cur[i] := g;
			cseq[i] := cs;
			chash[i] := ch;
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
		RETURN QUERY SELECT st[j], cur[j], NULL::bigint, NULL::json, NULL::json, NULL::boolean, NULL::bigint, NULL::text, NULL::text
			FROM generate_subscripts(p_scope, 1) j ORDER BY j;
		RETURN;
	END IF;

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

	-- The links, item by item from its row's chain head (the scopes are
	-- distinct, so no item's events follow another's).
	FOR i IN 1..n LOOP
		IF st[i] = 'OK' THEN
			cs := cseq[i];
			ch := chash[i];
			IF cre[i] THEN
				cs := cs + 1;
				ch := varplane_link(ch, cs, p_created_c[i]);
				crh[i] := ch;
				bc[i] := varplane_linked(p_created[i], cs, ch);
				cs := cs + 1;
				ch := varplane_link(ch, cs, p_activated_c[i]);
				ba[i] := varplane_linked(p_activated[i], cs, ch);
			ELSE
				cs := cs + 1;
				ch := varplane_link(ch, cs, p_activated_keyed_c[i]);
				ba[i] := varplane_linked(p_activated_keyed[i], cs, ch);
			END IF;
			cseq[i] := cs;
			chash[i] := ch;
		END IF;
	END LOOP;

	IF NOT EXISTS (SELECT FROM generate_subscripts(p_scope, 1) j WHERE st[j] = 'OK' AND p_key[j] IS NOT NULL) THEN
		INSERT INTO events (scope, kind, generation, body)
			SELECT p_scope[j], e.kind, e.gen, e.body FROM generate_subscripts(p_scope, 1) j,
				LATERAL (VALUES (1, 'revision-created', NULL::bigint, bc[j]), (2, 'activated', p_generation[j], ba[j])) e (o, kind, gen, body)
			WHERE st[j] = 'OK' AND (e.o = 2 OR cre[j]) ORDER BY j, e.o;
	ELSE
		WITH ev AS (
			INSERT INTO events (scope, kind, generation, body)
				SELECT p_scope[j], e.kind, e.gen, e.body FROM generate_subscripts(p_scope, 1) j,
					LATERAL (VALUES (1, 'revision-created', NULL::bigint, bc[j]), (2, 'activated', p_generation[j], ba[j])) e (o, kind, gen, body)
				WHERE st[j] = 'OK' AND (e.o = 2 OR cre[j]) ORDER BY j, e.o
				RETURNING events.scope, events.kind, events.seq
		)
		INSERT INTO idempotency (key, request_hash, scope, generation, event_seq)
			SELECT p_key[j], p_hash[j], ev.scope, CASE WHEN cre[j] THEN p_expected[j] ELSE p_generation[j] END, ev.seq
			FROM ev, LATERAL array_position(p_scope, ev.scope::text) j
			WHERE p_key[j] IS NOT NULL AND (ev.kind = 'revision-created') = cre[j];
	END IF;

	FOR i, v, r IN UPDATE heads h SET generation = p_generation[u.j], revision = p_revision[u.j], event = ba[u.j],
			version = h.version + 1, updated_at = now(), chain_seq = cseq[u.j], chain_hash = chash[u.j]
		FROM (SELECT array_position(p_scope, s) AS j, s FROM unnest(go_scopes) s) u
		WHERE h.scope = u.s
		RETURNING u.j, h.version, h.last_rejected
	LOOP
		ver[i] := v;
		rej[i] := r;
		cur[i] := p_generation[i];
	END LOOP;
	RETURN QUERY SELECT st[j], cur[j], ver[j], rej[j], CASE WHEN cre[j] THEN NULL ELSE rec[j] END, cre[j],
		CASE WHEN st[j] = 'OK' THEN cseq[j] END, CASE WHEN st[j] = 'OK' THEN chash[j] END, crh[j]
		FROM generate_subscripts(p_scope, 1) j ORDER BY j;
END
$$;

-- The signatures of versions 1 to 6 refuse: their callers would append
-- events without links.
CREATE FUNCTION varplane_refuse_unlinked() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'varplane schema version 7 links every event into its scope''s chain, and this varplane release does not: upgrade it'
		USING ERRCODE = 'feature_not_supported';
END
$$;

CREATE OR REPLACE FUNCTION varplane_create(p_scope text, p_revision text, p_record json, p_event json, p_key text, p_hash text,
	OUT status text)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM varplane_refuse_unlinked();
END
$$;

CREATE OR REPLACE FUNCTION varplane_activate(p_scope text, p_expected bigint, p_generation bigint, p_revision text, p_event json,
	p_key text, p_hash text, p_want_record boolean,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT last_rejected json, OUT rev_record json)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM varplane_refuse_unlinked();
END
$$;

CREATE OR REPLACE FUNCTION varplane_reject(p_scope text, p_event json, p_key text, p_hash text,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM varplane_refuse_unlinked();
END
$$;

CREATE OR REPLACE FUNCTION varplane_deactivate(p_scope text, p_expected bigint, p_generation bigint, p_event_head text, p_tail text,
	p_key text, p_hash text,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT last_rejected json, OUT descendants json)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM varplane_refuse_unlinked();
END
$$;

CREATE OR REPLACE FUNCTION varplane_publish(p_scope text, p_expected bigint, p_generation bigint, p_revision text,
	p_record json, p_created json, p_activated json, p_activated_keyed json, p_key text, p_hash text,
	OUT status text, OUT cur_generation bigint, OUT new_version bigint, OUT last_rejected json,
	OUT rev_record json, OUT created boolean)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM varplane_refuse_unlinked();
END
$$;

CREATE OR REPLACE FUNCTION varplane_publish_batch(p_scope text[], p_expected bigint[], p_generation bigint[], p_revision text[],
	p_record json[], p_created json[], p_activated json[], p_activated_keyed json[], p_key text[], p_hash text[])
RETURNS TABLE (status text, cur_generation bigint, new_version bigint, last_rejected json, rev_record json, created boolean)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM varplane_refuse_unlinked();
END
$$;
