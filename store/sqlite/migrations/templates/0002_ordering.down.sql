-- Undo 0002. Events waiting behind an earlier event of their key become
-- NEW again (plain, unordered events), so that nothing is left undeliverable.
UPDATE {{table}} SET status = 0 WHERE status = 4;

DROP TABLE IF EXISTS {{keytable}};

DROP INDEX IF EXISTS {{index:seq}};

ALTER TABLE {{table}} DROP COLUMN seq;
