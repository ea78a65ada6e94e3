-- easyjob schema version 7 for sqlite.
-- Generated from easyjob/store/schema.py by `make sql`; do not edit by hand.
-- Every column is documented in docs/schema.md.

CREATE TABLE easy_job_audit (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
	at DATETIME NOT NULL,
	actor VARCHAR(255) NOT NULL,
	action VARCHAR(32) NOT NULL,
	target VARCHAR(255),
	detail JSON,
	result VARCHAR(16) NOT NULL,
	message TEXT,
	remote VARCHAR(64)
);

CREATE INDEX ix_easy_job_audit_at ON easy_job_audit (at);

CREATE TABLE easy_job_calendar (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
	name VARCHAR(255) NOT NULL,
	first_day DATE NOT NULL,
	last_day DATE NOT NULL,
	note VARCHAR(1000),
	create_time DATETIME NOT NULL
);

CREATE INDEX ix_easy_job_calendar_name ON easy_job_calendar (name, first_day);

CREATE TABLE easy_job_catalog (
	catalog VARCHAR(64) NOT NULL,
	body TEXT NOT NULL,
	create_time DATETIME NOT NULL,
	PRIMARY KEY (catalog)
);

CREATE TABLE easy_job_meta (
	name VARCHAR(64) NOT NULL,
	value VARCHAR(255) NOT NULL,
	PRIMARY KEY (name)
);

CREATE TABLE easy_job_node (
	node_id VARCHAR(128) NOT NULL,
	host VARCHAR(255) NOT NULL,
	pid INTEGER NOT NULL,
	weight INTEGER DEFAULT 1 NOT NULL,
	strategy VARCHAR(255) DEFAULT 'default' NOT NULL,
	workers INTEGER DEFAULT 1 NOT NULL,
	status VARCHAR(16) NOT NULL,
	started_at DATETIME NOT NULL,
	heartbeat_at DATETIME NOT NULL,
	stopped_at DATETIME,
	clock_offset_ms BIGINT DEFAULT 0 NOT NULL,
	claimed_count BIGINT DEFAULT 0 NOT NULL,
	completed_count BIGINT DEFAULT 0 NOT NULL,
	stuck_count INTEGER DEFAULT 0 NOT NULL,
	version BIGINT DEFAULT 0 NOT NULL,
	broadcast_tasks JSON,
	catalog VARCHAR(64),
	health VARCHAR(1000),
	PRIMARY KEY (node_id)
);

CREATE INDEX ix_easy_job_node_status_heartbeat ON easy_job_node (status, heartbeat_at);

CREATE TABLE easy_job_task (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
	name VARCHAR(255) NOT NULL,
	func VARCHAR(512) NOT NULL,
	cron_expr VARCHAR(255),
	tz VARCHAR(64) DEFAULT 'UTC' NOT NULL,
	pid INTEGER,
	status VARCHAR(16) NOT NULL,
	next_start_time DATETIME,
	version BIGINT DEFAULT 0 NOT NULL,
	node_id VARCHAR(128),
	misfire VARCHAR(16) DEFAULT 'fire_once' NOT NULL,
	misfire_grace_ms BIGINT DEFAULT 60000 NOT NULL,
	overlap VARCHAR(16) DEFAULT 'serial' NOT NULL,
	retries INTEGER DEFAULT 0 NOT NULL,
	retry_delay_ms BIGINT DEFAULT 1000 NOT NULL,
	timeout_ms BIGINT,
	kwargs JSON NOT NULL,
	pruned_success_count BIGINT DEFAULT 0 NOT NULL,
	fail_count BIGINT DEFAULT 0 NOT NULL,
	create_time DATETIME NOT NULL,
	update_time DATETIME NOT NULL,
	seen_time DATETIME NOT NULL,
	every_ms BIGINT,
	anchor_time DATETIME,
	starts_at DATETIME,
	ends_at DATETIME,
	max_runs BIGINT,
	fire_count BIGINT DEFAULT 0 NOT NULL,
	accepts JSON,
	origin VARCHAR(16) DEFAULT 'code' NOT NULL,
	declared VARCHAR(512),
	shards INTEGER DEFAULT 1 NOT NULL,
	broadcast BOOLEAN DEFAULT 0 NOT NULL,
	jitter_ms BIGINT DEFAULT 0 NOT NULL,
	exclude_calendar VARCHAR(255),
	max_running INTEGER,
	priority INTEGER DEFAULT 0 NOT NULL,
	CONSTRAINT uq_easy_job_task_name UNIQUE (name)
);

CREATE INDEX ix_easy_job_task_due ON easy_job_task (status, next_start_time);

CREATE INDEX ix_easy_job_task_pid ON easy_job_task (pid);

CREATE TABLE easy_job_task_detail (
	id INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT,
	task_id INTEGER NOT NULL,
	pid INTEGER,
	fire_time DATETIME NOT NULL,
	due_time DATETIME NOT NULL,
	node_id VARCHAR(128),
	status VARCHAR(16) NOT NULL,
	triggered_by VARCHAR(16) NOT NULL,
	attempt INTEGER DEFAULT 1 NOT NULL,
	claim_time DATETIME,
	start_time DATETIME,
	end_time DATETIME,
	error_msg TEXT,
	version BIGINT DEFAULT 0 NOT NULL,
	create_time DATETIME NOT NULL,
	cron_key DATETIME GENERATED ALWAYS AS (CASE WHEN triggered_by = 'cron' AND attempt = 1 THEN fire_time END) STORED,
	recoveries INTEGER DEFAULT 0 NOT NULL,
	missed_count BIGINT,
	last_fire_time DATETIME,
	missed_from DATETIME,
	kwargs JSON,
	result JSON,
	traceback TEXT,
	shard INTEGER DEFAULT 0 NOT NULL,
	shards INTEGER DEFAULT 1 NOT NULL,
	target_node VARCHAR(128),
	jitter_ms BIGINT,
	priority INTEGER,
	CONSTRAINT uq_easy_job_task_detail_cron_fire UNIQUE (task_id, cron_key, shard)
);

CREATE INDEX ix_easy_job_task_detail_end ON easy_job_task_detail (end_time);

CREATE INDEX ix_easy_job_task_detail_held ON easy_job_task_detail (status, node_id);

CREATE INDEX ix_easy_job_task_detail_pending ON easy_job_task_detail (status, due_time);

CREATE INDEX ix_easy_job_task_detail_task_fire ON easy_job_task_detail (task_id, fire_time);

CREATE INDEX ix_easy_job_task_detail_task_status ON easy_job_task_detail (task_id, status);

CREATE TABLE easy_job_task_parent (
	task_id INTEGER NOT NULL,
	parent_id INTEGER NOT NULL,
	position INTEGER NOT NULL,
	PRIMARY KEY (task_id, parent_id)
);

CREATE INDEX ix_easy_job_task_parent_parent ON easy_job_task_parent (parent_id);

INSERT INTO easy_job_meta (name, value) VALUES ('schema_version', '7');
INSERT INTO easy_job_meta (name, value) VALUES ('compatible_from', '4');

-- Alembic's record of the same version, for `easyjob upgrade-db` later.
CREATE TABLE easy_job_alembic_version (
	version_num VARCHAR(32) NOT NULL,
	CONSTRAINT easy_job_alembic_version_pkc PRIMARY KEY (version_num)
);
INSERT INTO easy_job_alembic_version (version_num) VALUES ('schema_7');
