-- Exactly `{"backendId", "driverId", "workspaceId", "credentialIssued"}` with their rules.
CREATE OR REPLACE FUNCTION occ.is_backend_binding(b jsonb) RETURNS boolean LANGUAGE sql IMMUTABLE
    RETURN coalesce(CASE WHEN jsonb_typeof(b) = 'object' THEN
        (b - 'backendId'::text - 'driverId'::text - 'workspaceId'::text - 'credentialIssued'::text) = '{}'::jsonb
        AND jsonb_typeof(b->'backendId') = 'string' AND occ.is_ident(b->>'backendId')
        AND jsonb_typeof(b->'driverId') = 'string' AND occ.is_ident(b->>'driverId')
        AND jsonb_typeof(b->'workspaceId') = 'string' AND occ.is_workspace_id(b->>'workspaceId')
        AND jsonb_typeof(b->'credentialIssued') = 'boolean'
    ELSE false END, false);
