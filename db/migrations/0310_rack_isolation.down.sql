DROP TABLE facility_leak_report;
DROP TABLE rack_isolation_override;
DROP TABLE rack_isolation;
