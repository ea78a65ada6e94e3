-- easyjob schema version 6 for mysql.
-- Generated from easyjob/store/schema.py by `make sql`; do not edit by hand.
-- Every column is documented in docs/schema.md.

CREATE TABLE easy_job_audit (
	id BIGINT NOT NULL AUTO_INCREMENT,
	at DATETIME(6) NOT NULL,
	actor VARCHAR(255) NOT NULL,
	action VARCHAR(32) NOT NULL,
	target VARCHAR(255),
	detail JSON,
	result VARCHAR(16) NOT NULL,
	message TEXT,
	remote VARCHAR(64),
	PRIMARY KEY (id)
)COMMENT='One row per operator action from the dashboard: who, what, when, and its result.';

CREATE INDEX ix_easy_job_audit_at ON easy_job_audit (at);

CREATE TABLE easy_job_calendar (
	id BIGINT NOT NULL AUTO_INCREMENT,
	name VARCHAR(255) NOT NULL,
	first_day DATE NOT NULL,
	last_day DATE NOT NULL,
	note VARCHAR(1000),
	create_time DATETIME(6) NOT NULL,
	PRIMARY KEY (id)
)COMMENT='Calendars: one row per range of days (first_day..last_day, inclusive) a named calendar excludes; tasks declared with exclude=NAME skip their fires on those days.';

CREATE INDEX ix_easy_job_calendar_name ON easy_job_calendar (name, first_day);

CREATE TABLE easy_job_catalog (
	catalog VARCHAR(64) NOT NULL,
	body MEDIUMTEXT NOT NULL,
	create_time DATETIME(6) NOT NULL,
	PRIMARY KEY (catalog)
)COMMENT='What a node''s code declares (task name -> function, and the functions allowed for tasks added at run time), as JSON, once per distinct catalog; easy_job_node.catalog names it.';

CREATE TABLE easy_job_meta (
	name VARCHAR(64) NOT NULL,
	value VARCHAR(255) NOT NULL,
	PRIMARY KEY (name)
)COMMENT='Key/value facts about this database; holds the schema_version row.';

CREATE TABLE easy_job_node (
	node_id VARCHAR(128) NOT NULL,
	host VARCHAR(255) NOT NULL,
	pid INTEGER NOT NULL,
	weight INTEGER NOT NULL DEFAULT 1,
	strategy VARCHAR(255) NOT NULL DEFAULT 'default',
	workers INTEGER NOT NULL DEFAULT 1,
	status VARCHAR(16) NOT NULL,
	started_at DATETIME(6) NOT NULL,
	heartbeat_at DATETIME(6) NOT NULL,
	stopped_at DATETIME(6),
	clock_offset_ms BIGINT NOT NULL DEFAULT 0,
	claimed_count BIGINT NOT NULL DEFAULT 0,
	completed_count BIGINT NOT NULL DEFAULT 0,
	stuck_count INTEGER NOT NULL DEFAULT 0,
	version BIGINT NOT NULL DEFAULT 0,
	broadcast_tasks JSON,
	catalog VARCHAR(64),
	health VARCHAR(1000),
	PRIMARY KEY (node_id)
)COMMENT='One row per node incarnation; liveness is heartbeat_at judged in database time.';

CREATE INDEX ix_easy_job_node_status_heartbeat ON easy_job_node (status, heartbeat_at);

CREATE TABLE easy_job_task (
	id BIGINT NOT NULL AUTO_INCREMENT,
	name VARCHAR(255) NOT NULL,
	func VARCHAR(512) NOT NULL,
	cron_expr VARCHAR(255),
	tz VARCHAR(64) NOT NULL DEFAULT 'UTC',
	pid BIGINT,
	status VARCHAR(16) NOT NULL,
	next_start_time DATETIME(6),
	version BIGINT NOT NULL DEFAULT 0,
	node_id VARCHAR(128),
	misfire VARCHAR(16) NOT NULL DEFAULT 'fire_once',
	misfire_grace_ms BIGINT NOT NULL DEFAULT 60000,
	overlap VARCHAR(16) NOT NULL DEFAULT 'serial',
	retries INTEGER NOT NULL DEFAULT 0,
	retry_delay_ms BIGINT NOT NULL DEFAULT 1000,
	timeout_ms BIGINT,
	kwargs JSON NOT NULL,
	pruned_success_count BIGINT NOT NULL DEFAULT 0,
	fail_count BIGINT NOT NULL DEFAULT 0,
	create_time DATETIME(6) NOT NULL,
	update_time DATETIME(6) NOT NULL,
	seen_time DATETIME(6) NOT NULL,
	every_ms BIGINT,
	anchor_time DATETIME(6),
	starts_at DATETIME(6),
	ends_at DATETIME(6),
	max_runs BIGINT,
	fire_count BIGINT NOT NULL DEFAULT 0,
	accepts JSON,
	origin VARCHAR(16) NOT NULL DEFAULT 'code',
	declared VARCHAR(512),
	shards INTEGER NOT NULL DEFAULT 1,
	broadcast BOOL NOT NULL DEFAULT false,
	jitter_ms BIGINT NOT NULL DEFAULT 0,
	exclude_calendar VARCHAR(255),
	max_running INTEGER,
	priority INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (id),
	CONSTRAINT uq_easy_job_task_name UNIQUE (name)
)COMMENT='One row per task (a named function with a schedule); cron fires are made from it.';

CREATE INDEX ix_easy_job_task_due ON easy_job_task (status, next_start_time);

CREATE INDEX ix_easy_job_task_pid ON easy_job_task (pid);

CREATE TABLE easy_job_task_detail (
	id BIGINT NOT NULL AUTO_INCREMENT,
	task_id BIGINT NOT NULL,
	pid BIGINT,
	fire_time DATETIME(6) NOT NULL,
	due_time DATETIME(6) NOT NULL,
	node_id VARCHAR(128),
	status VARCHAR(16) NOT NULL,
	triggered_by VARCHAR(16) NOT NULL,
	attempt INTEGER NOT NULL DEFAULT 1,
	claim_time DATETIME(6),
	start_time DATETIME(6),
	end_time DATETIME(6),
	error_msg TEXT,
	version BIGINT NOT NULL DEFAULT 0,
	create_time DATETIME(6) NOT NULL,
	cron_key DATETIME(6) GENERATED ALWAYS AS (CASE WHEN triggered_by = 'cron' AND attempt = 1 THEN fire_time END) STORED,
	recoveries INTEGER NOT NULL DEFAULT 0,
	missed_count BIGINT,
	last_fire_time DATETIME(6),
	kwargs JSON,
	result JSON,
	traceback MEDIUMTEXT,
	shard INTEGER NOT NULL DEFAULT 0,
	shards INTEGER NOT NULL DEFAULT 1,
	target_node VARCHAR(128),
	jitter_ms BIGINT,
	priority INTEGER,
	PRIMARY KEY (id),
	CONSTRAINT uq_easy_job_task_detail_cron_fire UNIQUE (task_id, cron_key, shard)
)COMMENT='One row per attempt of a fire (the run history); claimed by version-checked UPDATEs.';

CREATE INDEX ix_easy_job_task_detail_end ON easy_job_task_detail (end_time);

CREATE INDEX ix_easy_job_task_detail_held ON easy_job_task_detail (status, node_id);

CREATE INDEX ix_easy_job_task_detail_pending ON easy_job_task_detail (status, due_time);

CREATE INDEX ix_easy_job_task_detail_task_fire ON easy_job_task_detail (task_id, fire_time);

CREATE INDEX ix_easy_job_task_detail_task_status ON easy_job_task_detail (task_id, status);

CREATE TABLE easy_job_task_parent (
	task_id BIGINT NOT NULL,
	parent_id BIGINT NOT NULL,
	position INTEGER NOT NULL,
	PRIMARY KEY (task_id, parent_id)
)COMMENT='The parents of each task of several parents (a join), in declared order; easy_job_task.pid is the first of them. A task of one parent has no row here.';

CREATE INDEX ix_easy_job_task_parent_parent ON easy_job_task_parent (parent_id);

INSERT INTO easy_job_meta (name, value) VALUES ('schema_version', '6');
INSERT INTO easy_job_meta (name, value) VALUES ('compatible_from', '4');

-- Alembic's record of the same version, for `easyjob upgrade-db` later.
CREATE TABLE easy_job_alembic_version (
	version_num VARCHAR(32) NOT NULL,
	CONSTRAINT easy_job_alembic_version_pkc PRIMARY KEY (version_num)
);
INSERT INTO easy_job_alembic_version (version_num) VALUES ('schema_6');
