-- 032: the fire's signature from before set-based firing goes (the sweeper's work is
-- sql/functions/sweeper.sql).

DROP FUNCTION IF EXISTS queen.timers_fire_v1(SMALLINT[], INT);
