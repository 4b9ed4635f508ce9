CREATE OR REPLACE FUNCTION occ.parse_scope(p_scope text, OUT scope_kind text, OUT namespace_id text,
    OUT resource_kind text, OUT resource_id text) RETURNS record
    LANGUAGE plpgsql STABLE
    AS $_$
DECLARE
    m text[];
BEGIN
    IF p_scope = 'installation' THEN
        scope_kind := 'installation';
        RETURN;
    END IF;
    m := regexp_match(p_scope, '^(namespace|agent|secret|service_account|credential_source):([^/]+)(?:/(.+))?$');
    IF m IS NULL OR (m[1] = 'namespace') <> (m[3] IS NULL) THEN
        RAISE EXCEPTION 'invalid scope %: installation, namespace:NS, agent:NS/AGENT, secret:NS/ID, service_account:NS/ID or credential_source:NS/ID',
            p_scope USING ERRCODE = 'invalid_parameter_value';
    END IF;
    namespace_id := occ.resolve_namespace(m[2]);
    IF m[1] = 'namespace' THEN
        scope_kind := 'namespace';
        RETURN;
    END IF;
    scope_kind := 'resource';
    resource_kind := m[1];
    IF m[1] = 'agent' THEN
        SELECT a.id INTO resource_id FROM occ.agents a
        WHERE a.namespace_id = parse_scope.namespace_id AND (a.id = m[3] OR a.name = m[3])
        ORDER BY a.id = m[3] DESC LIMIT 1;
    ELSIF m[1] = 'secret' THEN
        SELECT s.id INTO resource_id FROM occ.secrets s
        WHERE s.namespace_id = parse_scope.namespace_id AND s.id = m[3];
    ELSIF m[1] = 'credential_source' THEN
        SELECT c.id INTO resource_id FROM occ.credential_sources c
        WHERE c.namespace_id = parse_scope.namespace_id AND c.id = m[3];
    ELSE
        SELECT s.id INTO resource_id FROM occ.service_accounts s
        WHERE s.namespace_id = parse_scope.namespace_id AND s.id = m[3];
    END IF;
    IF resource_id IS NULL THEN
        RAISE EXCEPTION 'no % % in Namespace %', m[1], m[3], m[2] USING ERRCODE = 'no_data_found';
    END IF;
END $_$;
