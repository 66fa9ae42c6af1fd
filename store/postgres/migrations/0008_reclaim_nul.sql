-- varplane schema version 8: reclamation of a revision whose document
-- holds a string with \u0000.
--
-- PostgreSQL's json operators (->>, json_each) and the jsonb type refuse
-- a string holding \u0000, which a document may hold (the json type keeps
-- it as text). Version 6 checked the log's one edit (a reclaimed
-- revision's revision-created event loses its document) with jsonb, and
-- found the event by body->>'revision': reclaiming such a revision failed,
-- and the whole pass over its scope with it.
--
-- The edit is now checked on the text: the new body is the old one with
-- its top-level document member cut out (what the store writes), or, for
-- a body the store had to encode anew, equal to it as jsonb less the
-- document when jsonb can hold both. The revision is read by position:
-- eventjson writes kind, scope, revision, document in that order, and a
-- JSON string cannot hold an unescaped quote, so the first `"revision":"`
-- and the first `,"document":` of the text are the event's own members.

-- varplane_event_revision returns the revision member of an event body
-- written by eventjson, without parsing the rest of it.
CREATE FUNCTION varplane_event_revision(p_body json) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT substring(p_body::text from '"revision":"([^"\\]*)"')
$$;

-- varplane_reclaim_edit_ok says whether p_new is p_old without its
-- document member.
CREATE FUNCTION varplane_reclaim_edit_ok(p_old json, p_new json) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
	o text := p_old::text;
	n text := p_new::text;
	a int := strpos(o, ',"document":');
	l int := length(o) - length(n);
BEGIN
	-- The cut: o[a, a+l) is removed, the rest of the text is unchanged,
	-- and what is removed is the member's name and one JSON value, whole
	-- (the json type's input refuses anything before or after it), so no
	-- other member went with it.
	IF a > 0 AND l > 12 AND left(o, a - 1) = left(n, a - 1) AND substr(o, a + l) = substr(n, a) THEN
		BEGIN
			PERFORM substr(o, a + 12, l - 12)::json;
			RETURN true;
		EXCEPTION WHEN invalid_text_representation THEN
			RETURN false;
		END;
	END IF;
	BEGIN
		RETURN p_old::jsonb ? 'document' AND p_new::jsonb = p_old::jsonb - 'document';
	EXCEPTION WHEN untranslatable_character THEN
		RETURN false;
	END;
END
$$;

CREATE OR REPLACE FUNCTION events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'UPDATE' AND OLD.kind = 'revision-created'
		AND NEW.seq = OLD.seq AND NEW.scope = OLD.scope AND NEW.kind = OLD.kind
		AND NEW.generation IS NOT DISTINCT FROM OLD.generation AND NEW.recorded_at = OLD.recorded_at
		AND varplane_reclaim_edit_ok(OLD.body, NEW.body)
		AND EXISTS (SELECT 1 FROM revisions r
			WHERE r.scope = OLD.scope AND r.revision = varplane_event_revision(OLD.body) AND r.reclaimed_at IS NOT NULL) THEN
		RETURN NEW;
	END IF;
	RAISE EXCEPTION 'varplane events are append-only (% refused)', TG_OP;
END
$$;
