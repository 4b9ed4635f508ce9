-- The legacy `access_token_ref` as a credential: `NAME/KEY` becomes its secretRef; anything
-- else named no Secret a driver could mount, so the account is left not issued (NULL).
CREATE OR REPLACE FUNCTION occ.legacy_access_token_credential(ref text) RETURNS jsonb LANGUAGE sql IMMUTABLE
    RETURN CASE WHEN occ.is_secret_name(split_part(ref, '/', 1))
                 AND occ.is_secret_key(substr(ref, length(split_part(ref, '/', 1)) + 2))
                 AND position('/' IN ref) > 0
        THEN jsonb_build_object('kind', 'access_token', 'secretRef', jsonb_build_object(
            'name', split_part(ref, '/', 1),
            'key', substr(ref, length(split_part(ref, '/', 1)) + 2)))
    END;
