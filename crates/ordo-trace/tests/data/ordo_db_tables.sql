-- The columns of an `ordo server` database that the `ordo-db` reader reads (the server has more).
-- Schema version 4 adds nodes.gpu_mem_mib, nodes.features, jobs.gpu_models, jobs.gpu_mem_mib and
-- jobs.features, which the reader takes where they are (tests/ordodb.rs adds them to these tables).
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE nodes(name TEXT PRIMARY KEY, seq INTEGER NOT NULL, gpus INTEGER NOT NULL, fake INTEGER NOT NULL,
  gpu_model TEXT, state TEXT NOT NULL, last_seen INTEGER NOT NULL, cpus INTEGER, mem_mib INTEGER);
CREATE TABLE jobs(id INTEGER PRIMARY KEY, user TEXT NOT NULL, name TEXT NOT NULL, gpus INTEGER NOT NULL, cpus INTEGER,
  mem_mib INTEGER, time_limit_ms INTEGER NOT NULL, priority INTEGER NOT NULL, state TEXT NOT NULL,
  submit INTEGER NOT NULL, start INTEGER, end_time INTEGER, node TEXT, executed_ms INTEGER NOT NULL DEFAULT 0);
CREATE TABLE audit(id INTEGER PRIMARY KEY, time INTEGER NOT NULL, actor TEXT NOT NULL, kind TEXT NOT NULL,
  job INTEGER, policy TEXT NOT NULL, detail TEXT NOT NULL);
CREATE TABLE job_activity(job INTEGER PRIMARY KEY, samples INTEGER NOT NULL, util_sum REAL NOT NULL);
