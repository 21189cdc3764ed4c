DROP TABLE IF EXISTS rack_rule_association;
DROP TABLE IF EXISTS operation_rule;
