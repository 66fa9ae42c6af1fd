-- varplane schema version 3: the data-plane instances' status heartbeats
-- and their canary reports (docs/instances.md, docs/control.md). Neither is
-- a document: no event is logged for them, they expire, and a writer
-- replaces its previous row. expires is the database's clock, so replicas
-- with skewed clocks agree on what is alive.

-- instance_status holds each instance's latest status value (instance.Status
-- as JSON), by instance id; a row lives two minutes after its last write.
CREATE TABLE instance_status (
	id      text COLLATE "C" PRIMARY KEY,
	value   bytea NOT NULL,
	expires timestamptz NOT NULL
);

-- canary_reports holds each instance's latest report of a canary window
-- (instance.Report as JSON); a row lives eight days after its last write.
CREATE TABLE canary_reports (
	window_id text COLLATE "C" NOT NULL,
	id        text COLLATE "C" NOT NULL,
	value     bytea NOT NULL,
	expires   timestamptz NOT NULL,
	PRIMARY KEY (window_id, id)
);

-- Sweeping expired rows reads them by expiry.
CREATE INDEX instance_status_expires ON instance_status (expires);
CREATE INDEX canary_reports_expires ON canary_reports (expires);
