DROP TABLE inventory_sync_run;
DROP TABLE component_drift;
ALTER TABLE nvl_domain DROP COLUMN nmxc_cluster_id;
ALTER TABLE rack DROP COLUMN rack_profile_id, DROP COLUMN rack_group_id, DROP COLUMN health;
ALTER TABLE component DROP COLUMN health, DROP COLUMN power_state;
