-- `admin harness approve`: makes `p_version` the one approved version of a Harness in a mode
-- (installation `administer`), audited with the version it replaced.
CREATE OR REPLACE FUNCTION occ.harness_approve(p_actor text, p_harness text, p_mode text, p_version text)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    previous text;
BEGIN
    PERFORM occ.require_authorized(p_actor, 'administer', 'installation', occ.installation_id(),
                                   NULL, 'approve Harness versions');
    SELECT version INTO previous FROM occ.approved_harnesses
    WHERE harness_id = p_harness AND mode = p_mode FOR UPDATE;
    INSERT INTO occ.approved_harnesses (harness_id, mode, version, approved_by)
    VALUES (p_harness, p_mode, p_version, p_actor)
    ON CONFLICT (harness_id, mode) DO UPDATE
        SET version = EXCLUDED.version, approved_by = EXCLUDED.approved_by,
            approved_at = clock_timestamp();
    PERFORM occ.audit_admission(p_actor, 'openclaw.harnesses.approve', 'installation',
        occ.installation_id(), NULL, NULL,
        jsonb_build_object('harnessId', p_harness, 'mode', p_mode, 'version', p_version,
                           'previousVersion', previous));
    RETURN jsonb_build_object('id', p_harness, 'mode', p_mode, 'version', p_version,
                              'previousVersion', previous);
END $$;
