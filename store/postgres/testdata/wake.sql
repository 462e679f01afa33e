-- NotifyInsert (core.InsertNotifier), in the writer's transaction
SELECT pg_notify($1, '');
