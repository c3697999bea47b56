-- A small journal as `firebreak run` writes it (schema 1.0): three attempts,
-- one crash, one hang, four checkpoints.  Measured costs the test expects:
-- stall 2 s, persist 6 s, interval 117.75 s, detect crash 0.5 s / hang 30 s,
-- restart 55 s (40 and 70).
INSERT INTO meta VALUES ('schema_version', '1.0'), ('writer', 'test');
INSERT INTO run (id, name, job_id, run_dir, command, launcher, nproc, nnodes,
                 hostname, max_restarts, hang_timeout_s, started_at)
  VALUES (1, 't', 'j', '.', '["train"]', 'local', 4, 1, 'h', 3, 30, 1000);
INSERT INTO attempt (id, run_id, number, started_at, ready_at, ended_at)
  VALUES (1, 1, 0, 1000, 1010, 1400),
         (2, 1, 1, 1401, 1436, 1800),
         (3, 1, 2, 1801, 1866, NULL);
INSERT INTO incident (run_id, attempt_id, kind, occurred_at, detected_at,
                      detect_ms, detail)
  VALUES (1, 1, 'crash', 1395.5, 1396, 500, 'rank 2 died'),
         (1, 2, 'hang', 1766, 1796, 30000, 'rank 1 hung');
INSERT INTO checkpoint (run_id, attempt_id, step, committed_at, ranks, bytes,
                        stall_ms, persist_ms, status)
  VALUES (1, 1, 100, 1130, 4, 4096, 1500, 5000, 'complete'),
         (1, 1, 200, 1250, 4, 4096, 2500, 7000, 'complete'),
         (1, 2, 300, 1560, 4, 4096, 2000, 6000, 'complete'),
         (1, 2, 400, 1680, 4, 4096, 2000, 6000, 'complete'),
         (1, 2, 500, 1700, 4, 4096, 2000, 6000, 'failed');
