-- Every answered request inserts a generation and a ledger charge: each index on them is
-- one more B-tree written per request. No query reads these two (a generation is read by
-- its id, the primary key; activity uses generations_workspace_created; key spending
-- uses ledger_key_charges).
DROP INDEX generations_workspace;
DROP INDEX ledger_workspace;
