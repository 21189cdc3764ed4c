DROP TRIGGER IF EXISTS component_move_bmcs ON component;
DROP FUNCTION IF EXISTS component_move_bmcs();
DROP TRIGGER IF EXISTS bmc_set_rack ON bmc;
DROP FUNCTION IF EXISTS bmc_set_rack();
DROP INDEX IF EXISTS bmc_rack_idx;
ALTER TABLE bmc DROP COLUMN IF EXISTS rack_id;
