-- firebreak journal, schema version 1.1 (1.1 added the columns and the
-- table marked "1.1"; a 1.0 file opened by the writer gains them).
-- One SQLite database per run directory (journal.sqlite), written only by
-- the supervisor (`firebreak run`).  Times are Unix seconds (REAL, microsecond
-- precision, CLOCK_REALTIME); durations carry their unit in the name.
-- Readers: accept any schema_version with the same major number (meta).

CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS run (
  id              INTEGER PRIMARY KEY,
  name            TEXT NOT NULL,
  job_id          TEXT NOT NULL,
  run_dir         TEXT NOT NULL,
  command         TEXT NOT NULL,      -- JSON array of argv
  launcher        TEXT NOT NULL,      -- local | mpirun | slurm
  nproc           INTEGER NOT NULL,   -- world size
  nnodes          INTEGER NOT NULL DEFAULT 1,
  hostname        TEXT NOT NULL,
  max_restarts    INTEGER NOT NULL,
  hang_timeout_s  REAL NOT NULL,
  options         TEXT NOT NULL DEFAULT '{}', -- JSON of every option
  started_at      REAL NOT NULL,
  ended_at        REAL,
  status          TEXT NOT NULL DEFAULT 'running',
                  -- running | completed | failed | interrupted
  exit_code       INTEGER,
  reason          TEXT               -- why it ended, for people
);

CREATE TABLE IF NOT EXISTS attempt (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES run(id),
  number          INTEGER NOT NULL,   -- 0 for the first launch
  started_at      REAL NOT NULL,      -- launch began
  launched_at     REAL,               -- every rank process started
  ready_at        REAL,               -- first step completed (all ranks)
  ended_at        REAL,
  restored_step   INTEGER,            -- checkpoint it resumed from, NULL: fresh
  restore_s       REAL,               -- time ranks spent in restore (max)
  start_step      INTEGER,            -- first step it completed
  end_step        INTEGER,            -- last step completed (max over ranks)
  outcome         TEXT,               -- completed | failed | stopped
  nodes           TEXT                -- JSON array of its node names, in rank order
);

CREATE TABLE IF NOT EXISTS incident (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES run(id),
  attempt_id      INTEGER NOT NULL REFERENCES attempt(id),
  kind            TEXT NOT NULL,
        -- crash | hang | error_exit | launch_failure | node_failure
        -- | save_failed | restore_fallback | interrupted
  occurred_at     REAL NOT NULL,      -- best estimate of when it happened
  detected_at     REAL NOT NULL,      -- when the supervisor knew
  detect_ms       REAL NOT NULL,      -- detected_at - occurred_at
  rank            INTEGER,            -- NULL: not one rank
  node            TEXT,               -- the rank's node (Slurm's name; else the host)
  signal          INTEGER,            -- fatal signal, if any
  exit_code       INTEGER,            -- exit code, if any
  phase           TEXT,               -- init | train | checkpoint | restore | done
  step            INTEGER,            -- last step the rank completed
  lost_s          REAL,               -- work lost: since the last durable checkpoint
  injected        TEXT,               -- the injected fault that fired, if any
  detail          TEXT NOT NULL,      -- one line for people
  last_lines      TEXT,               -- the failing rank's last output lines
  fr_verdict      TEXT,               -- flight-recorder verdict (JSON), if run
  health          TEXT,               -- health verdict (JSON), if run
  category        TEXT,               -- Llama 3 category (report fills if NULL)
  component       TEXT,
  evidence        TEXT,               -- what decided the category
  host            TEXT                -- 1.1: hostname of the node's machine
);

CREATE TABLE IF NOT EXISTS checkpoint (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES run(id),
  attempt_id      INTEGER NOT NULL REFERENCES attempt(id),
  step            INTEGER NOT NULL,
  committed_at    REAL NOT NULL,      -- when the last rank's shard committed
  ranks           INTEGER NOT NULL,   -- shards reported committed
  bytes           INTEGER NOT NULL,   -- sum over ranks
  stall_ms        REAL NOT NULL,      -- max over ranks: training blocked
  persist_ms      REAL NOT NULL,      -- max over ranks: background write
  status          TEXT NOT NULL       -- complete | partial | failed
);

-- Every message a rank sent through its segment, as received.
CREATE TABLE IF NOT EXISTS event (
  id              INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES run(id),
  attempt_id      INTEGER NOT NULL REFERENCES attempt(id),
  time            REAL NOT NULL,
  rank            INTEGER,
  kind            TEXT NOT NULL,      -- ckpt_begin, ckpt_committed, ...
  step            INTEGER,
  code            INTEGER,
  bytes           INTEGER,
  value_ms        REAL,
  detail          TEXT,
  node            TEXT,               -- 1.1: the rank's node, as in placement
  host            TEXT,               -- 1.1: and its machine's hostname
  source          TEXT                -- 1.1, restore_done: memory | peer | storage
);

-- Progress samples: one row per rank about once a second while it steps.
CREATE TABLE IF NOT EXISTS step_sample (
  run_id          INTEGER NOT NULL,
  attempt_id      INTEGER NOT NULL,
  rank            INTEGER NOT NULL,
  time            REAL NOT NULL,
  step            INTEGER NOT NULL,
  step_time_ms    REAL,               -- smoothed step duration
  node            TEXT,               -- 1.1: the rank's node, as in placement
  host            TEXT                -- 1.1: and its machine's hostname
);
CREATE INDEX IF NOT EXISTS step_sample_by_rank ON step_sample(run_id, rank, time);

-- 1.1: where each rank of an attempt ran.  node: the Slurm node name (the
-- host's name under the local launcher); host: the machine's hostname as
-- its node watcher (or the supervisor, for its own host) reported it.
CREATE TABLE IF NOT EXISTS placement (
  run_id          INTEGER NOT NULL,
  attempt_id      INTEGER NOT NULL REFERENCES attempt(id),
  rank            INTEGER NOT NULL,
  node            TEXT NOT NULL,
  host            TEXT,
  PRIMARY KEY (attempt_id, rank)
);
