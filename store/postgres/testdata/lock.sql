-- TryLock, Check and Unlock
SELECT pg_try_advisory_lock(hashtextextended($1, 0));
SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted AND objsubid = 1 AND classid::bigint = (hashtextextended($1, 0) >> 32) & 4294967295 AND objid::bigint = hashtextextended($2, 0) & 4294967295);
SELECT pg_advisory_unlock(hashtextextended($1, 0));
