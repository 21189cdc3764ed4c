-- What an approval's subject recomputes its plan from at approval (a run's
-- normalized create input; credentials only sealed).
ALTER TABLE approval_request ADD COLUMN input jsonb NOT NULL DEFAULT '{}';
