-- The components with a detected leak, which leak detection reads every
-- cycle (every 3 s by default) to find those no longer leaking, without
-- reading every component_leak row (docs/engine.md, "How a step stays
-- cheap": the background work at 3,000 racks).
CREATE INDEX component_leak_detected ON component_leak (component_id) WHERE status = 'detected';
