-- 059: sweeper entry points that no release calls go. Release 0.1.0 (migrations 001-042) never had
-- them: its sweepers call queen.sweeper_pass_v1, which fires through queen.timers_fire_v1, and both
-- stay. The sweepers since call queen.sweeper_pass_v4 and queen.timers_fire_v3. A database migrated
-- by a build in between may still hold what those builds defined and the family file has dropped:
-- queen.timers_fire_v2 and queen.sweeper_pass_v3 (at the end, calls of their successors answering
-- no links) and queen.sweeper_pass_v2 (the pass before sealed timers, which v3 replaced). A database
-- at 0.1.0, and a new one, has none of them, hence IF EXISTS.
DROP FUNCTION IF EXISTS queen.timers_fire_v2(INT);
DROP FUNCTION IF EXISTS queen.sweeper_pass_v3(TIMESTAMPTZ, TEXT, INT, INT, INT, BOOLEAN, INT);
DROP FUNCTION IF EXISTS queen.sweeper_pass_v2(TIMESTAMPTZ, TEXT, INT, INT, INT, BOOLEAN, INT);
