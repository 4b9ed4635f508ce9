-- Public reads never see tombstones.
CREATE OR REPLACE VIEW occ.namespaces AS
    SELECT id, name, status, existing_namespace, created_by, created_at, updated_at
    FROM occ.namespaces_all WHERE deleted_at IS NULL;
