-- The small journal of journal.sql as a later schema minor writes it:
-- restore_done events name the tier that served them (event.source).
-- Four ranks restore 1 MiB each after the crash of attempt 0 (rank 2's node
-- memory is kept: memory, 0.01 s each) and after the hang of attempt 1
-- (ranks 0-1 from a peer, 0.05 s; ranks 2-3 from storage, 0.5 s; no
-- source: storage, 0.5 s).  Rates the test expects: memory 100 MiB/s,
-- peer 20 MiB/s, storage 2 MiB/s; restore_s of the attempts 1 s and 3 s.
-- (schema.sql, loaded first, has event.source since 1.1.)
UPDATE meta SET value = '1.1' WHERE key = 'schema_version';
UPDATE attempt SET restore_s = 1 WHERE id = 2;
UPDATE attempt SET restore_s = 3 WHERE id = 3;
INSERT INTO event (run_id, attempt_id, time, rank, kind, step, bytes,
                   value_ms, source)
  VALUES (1, 2, 1430, 0, 'restore_done', 200, 1048576, 10, 'memory'),
         (1, 2, 1430, 1, 'restore_done', 200, 1048576, 10, 'memory'),
         (1, 2, 1430, 2, 'restore_done', 200, 1048576, 10, 'memory'),
         (1, 2, 1430, 3, 'restore_done', 200, 1048576, 10, 'memory'),
         (1, 3, 1860, 0, 'restore_done', 400, 1048576, 50, 'peer'),
         (1, 3, 1860, 1, 'restore_done', 400, 1048576, 50, 'peer'),
         (1, 3, 1860, 2, 'restore_done', 400, 1048576, 500, 'storage'),
         (1, 3, 1860, 3, 'restore_done', 400, 1048576, 500, NULL);
