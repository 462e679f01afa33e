-- Drops the table, its indexes and every event in it.
DROP TABLE IF EXISTS {{table}};
